#include "kv/gang_kv.h"

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gdt::kv {
namespace {

using ::testing::HasSubstr;

const KvCaller kAlice{"gang-a", 1, "token-a"};
const KvCaller kBob{"gang-b", 1, "token-b"};

// Records what a wait's callback received.
struct WaitResult {
  int calls = 0;
  absl::StatusOr<std::string> value = absl::UnknownError("not called");

  GangKv::WaitCallback Callback() {
    return [this](absl::StatusOr<std::string> result) {
      ++calls;
      value = std::move(result);
    };
  }
};

class GangKvTest : public ::testing::Test {
 protected:
  GangKvTest() : kv_(Limits()) {
    kv_.OpenGang(kAlice.gang_id, kAlice.epoch, kAlice.token);
    kv_.OpenGang(kBob.gang_id, kBob.epoch, kBob.token);
  }
  static KvLimits Limits() {
    KvLimits limits;
    limits.max_value_bytes = 20;
    limits.max_key_bytes = 8;
    limits.max_keys_per_gang = 3;
    limits.max_gdt_keys_per_gang = 2;
    limits.max_waiters_per_gang = 2;
    return limits;
  }
  GangKv kv_;
};

TEST_F(GangKvTest, SetThenGetReturnsTheValue) {
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v1").ok());
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v2").ok());
  EXPECT_EQ(*kv_.Get(kAlice, "k"), "v2");
  EXPECT_EQ(kv_.Get(kAlice, "missing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(GangKvTest, GangsDoNotSeeEachOthersKeys) {
  ASSERT_TRUE(kv_.Set(kAlice, "k", "alice").ok());
  EXPECT_EQ(kv_.Get(kBob, "k").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(kv_.Set(kBob, "k", "bob").ok());
  EXPECT_EQ(*kv_.Get(kAlice, "k"), "alice");
}

TEST_F(GangKvTest, WrongOrMissingTokenIsRefused) {
  KvCaller wrong = kAlice;
  wrong.token = kBob.token;  // Another gang's valid token.
  absl::Status status = kv_.Set(wrong, "k", "v");
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("wrong gang token for gang gang-a"));
  KvCaller none = kAlice;
  none.token.clear();
  EXPECT_EQ(kv_.Get(none, "k").status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(GangKvTest, OtherEpochAndUnknownGangAreRefused) {
  KvCaller old_epoch = kAlice;
  old_epoch.epoch = 2;
  absl::Status status = kv_.Set(old_epoch, "k", "v");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("is at epoch 1"));
  KvCaller unknown{"gang-x", 1, "t"};
  EXPECT_EQ(kv_.Get(unknown, "k").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(kv_.Get(unknown, "k").status().message(),
              HasSubstr("has no key-value store"));
}

// Whoever holds no token of the gang cannot tell a gang that exists from one
// that does not; a member of an earlier epoch still hears its epoch is over.
TEST_F(GangKvTest, OnlyAHolderOfTheGangsTokenLearnsMoreThanOneRefusal) {
  const KvCaller guess_a{"gang-a", 1, "guess"};
  const KvCaller guess_z{"gang-z", 1, "guess"};
  const absl::Status known = kv_.Get(guess_a, "k").status();
  EXPECT_EQ(known.code(), absl::StatusCode::kPermissionDenied);
  const absl::Status unknown = kv_.Get(guess_z, "k").status();
  EXPECT_EQ(unknown.code(), known.code());
  // The same line but for the gang named by the caller.
  EXPECT_EQ(std::string(unknown.message()),
            absl::StrReplaceAll(known.message(), {{"gang-a", "gang-z"}}));

  kv_.OpenGang("gang-a", 2, "token-a2");
  kv_.OpenGang("gang-a", 3, "token-a3");
  absl::Status stale = kv_.Get(kAlice, "k").status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(),
              HasSubstr("gang gang-a is at epoch 3; the store of epoch 1"));
  // An earlier token naming the current epoch is still a member's.
  stale = kv_.Get(KvCaller{"gang-a", 3, "token-a2"}, "k").status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("the store of epoch 2 is gone"));
  // A guess naming an old epoch is a stranger.
  EXPECT_EQ(kv_.Get(KvCaller{"gang-a", 1, "guess"}, "k").status().code(),
            absl::StatusCode::kPermissionDenied);

  // Earlier tokens handed in (a restarted coordinator) count the same.
  GangKv restarted(Limits());
  restarted.OpenGang(
      "gang-a", 3, "token-a3",
      {{1, Sha256Hex(kAlice.token)}, {2, Sha256Hex("token-a2")}});
  EXPECT_EQ(restarted.Get(kAlice, "k").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(restarted.Get(KvCaller{"gang-a", 2, "nope"}, "k").status().code(),
            absl::StatusCode::kPermissionDenied);

  // Once the gang ended, its members are strangers too.
  kv_.EndGang("gang-a");
  EXPECT_EQ(kv_.Get(kAlice, "k").status(),
            kv_.Get(KvCaller{"gang-a", 1, "guess"}, "k").status());
}

TEST_F(GangKvTest, NewEpochStartsEmptyAndAbortsOldWaits) {
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v").ok());
  WaitResult wait;
  kv_.Wait(kAlice, "other", wait.Callback());
  kv_.OpenGang("gang-a", 2, "token-a2");
  EXPECT_EQ(wait.calls, 1);
  EXPECT_EQ(wait.value.status().code(), absl::StatusCode::kAborted);
  const KvCaller next{"gang-a", 2, "token-a2"};
  EXPECT_EQ(kv_.Get(next, "k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kv_.Get(kAlice, "k").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(GangKvTest, ReopeningTheSameEpochKeepsTheData) {
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v").ok());
  kv_.OpenGang(kAlice.gang_id, kAlice.epoch, kAlice.token);
  EXPECT_EQ(*kv_.Get(kAlice, "k"), "v");
}

TEST_F(GangKvTest, KeyAndValueLimits) {
  absl::Status status = kv_.Set(kAlice, "k", std::string(21, 'x'));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("above the limit of 20 bytes"));
  EXPECT_TRUE(kv_.Set(kAlice, "k", std::string(20, 'x')).ok());
  EXPECT_EQ(kv_.Set(kAlice, "", "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv_.Set(kAlice, "123456789", "v").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GangKvTest, KeyCountLimitAllowsOverwrites) {
  ASSERT_TRUE(kv_.Set(kAlice, "a", "1").ok());
  ASSERT_TRUE(kv_.Set(kAlice, "b", "1").ok());
  ASSERT_TRUE(kv_.Set(kAlice, "c", "1").ok());
  absl::Status status = kv_.Set(kAlice, "d", "1");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("already has 3 keys, the limit"));
  EXPECT_TRUE(kv_.Set(kAlice, "c", "2").ok());
  EXPECT_EQ(kv_.Add(kAlice, "e", 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Other gangs have their own budget.
  EXPECT_TRUE(kv_.Set(kBob, "d", "1").ok());
}

// A store full of user keys still takes gdt's own (the checkpoint notice,
// NCCL unique ids), which have their own quota.
TEST_F(GangKvTest, GdtKeysHaveTheirOwnQuota) {
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE(kv_.Set(kAlice, key, "1").ok());
  }
  EXPECT_TRUE(kv_.Set(kAlice, "gdt/n", "notice").ok());
  EXPECT_TRUE(kv_.CompareAndSet(kAlice, "gdt/id", std::nullopt, "x")->swapped);
  absl::Status third = kv_.Set(kAlice, "gdt/z", "1");
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.message(),
            "gang gang-a already has 2 keys under gdt/, the limit; cannot add "
            "'gdt/z'");
  absl::Status user = kv_.Set(kAlice, "d", "1");
  EXPECT_EQ(user.message(),
            "gang gang-a already has 3 keys, the limit; cannot add 'd'");
}

// All gangs' stores together hold at most max_bytes_total (beyond each
// gang's guaranteed share): one gang that fills them gets a clear refusal,
// another gang still stores its first bytes, and what an ended gang or an
// old epoch held is given back.
TEST(GangKvTotalTest, AllGangsTogetherAreBoundedButEachKeepsItsShare) {
  KvLimits limits;
  limits.max_value_bytes = 30;
  limits.max_keys_per_gang = 100;
  limits.max_bytes_total = 200;
  limits.guaranteed_bytes_per_gang = 40;
  GangKv kv(limits);
  kv.OpenGang(kAlice.gang_id, kAlice.epoch, kAlice.token);
  kv.OpenGang(kBob.gang_id, kBob.epoch, kBob.token);
  const std::string value(30, 'x');  // 32 bytes with a key of 2.
  int stored = 0;
  absl::Status refused;
  for (int i = 10; i < 99 && refused.ok(); ++i) {
    refused = kv.Set(kAlice, std::to_string(i), value);
    if (refused.ok()) ++stored;
  }
  EXPECT_EQ(stored, 6);  // 192 bytes; a seventh would be 224.
  EXPECT_EQ(kv.total_bytes(), 192u);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "the key-value stores of all gangs hold 192 bytes, the "
            "coordinator's limit is 200 (kv_max_total_mib), and gang gang-a "
            "holds 192 (beyond the 40 every gang may hold); cannot store 30 "
            "bytes at key '16'");
  // Overwriting with no more bytes still works for the gang that filled
  // it.
  EXPECT_TRUE(kv.Set(kAlice, "10", "short").ok());
  // Another gang still stores its guaranteed share, not more.
  EXPECT_TRUE(kv.Set(kBob, "id", value).ok());
  EXPECT_EQ(kv.Set(kBob, "id2", value).code(),
            absl::StatusCode::kResourceExhausted);
  // An ended gang gives its bytes back.
  kv.EndGang(kAlice.gang_id);
  EXPECT_EQ(kv.total_bytes(), 32u);
  EXPECT_TRUE(kv.Set(kBob, "id2", value).ok());
  // So does a gang's earlier epoch.
  for (int i = 10; i < 14; ++i) {
    ASSERT_TRUE(kv.Set(kBob, std::to_string(i), value).ok()) << i;
  }
  EXPECT_EQ(kv.total_bytes(), 193u);
  kv.OpenGang(kBob.gang_id, 2, "token-b2");
  EXPECT_EQ(kv.total_bytes(), 0u);
}

TEST_F(GangKvTest, WaitReturnsAtOnceWhenTheKeyExists) {
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v").ok());
  WaitResult wait;
  EXPECT_EQ(kv_.Wait(kAlice, "k", wait.Callback()), 0u);
  EXPECT_EQ(wait.calls, 1);
  EXPECT_EQ(*wait.value, "v");
}

TEST_F(GangKvTest, WaitCompletesWhenTheKeyIsSet) {
  WaitResult first;
  WaitResult second;
  EXPECT_NE(kv_.Wait(kAlice, "k", first.Callback()), 0u);
  EXPECT_NE(kv_.Wait(kAlice, "k", second.Callback()), 0u);
  EXPECT_EQ(first.calls, 0);
  ASSERT_TRUE(kv_.Set(kBob, "k", "wrong gang").ok());
  EXPECT_EQ(first.calls, 0);
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v").ok());
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(*first.value, "v");
  EXPECT_EQ(*second.value, "v");
  EXPECT_EQ(kv_.waiter_count(), 0u);
}

TEST_F(GangKvTest, AddAndCompareAndSetWakeWaiters) {
  WaitResult counter;
  WaitResult flag;
  kv_.Wait(kAlice, "n", counter.Callback());
  kv_.Wait(kAlice, "f", flag.Callback());
  ASSERT_TRUE(kv_.Add(kAlice, "n", 5).ok());
  ASSERT_TRUE(kv_.CompareAndSet(kAlice, "f", std::nullopt, "up").ok());
  EXPECT_EQ(*counter.value, "5");
  EXPECT_EQ(*flag.value, "up");
}

TEST_F(GangKvTest, CancelledWaitIsNeverCalled) {
  WaitResult wait;
  const uint64_t handle = kv_.Wait(kAlice, "k", wait.Callback());
  kv_.CancelWait(handle);
  kv_.CancelWait(handle);  // Idempotent.
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v").ok());
  EXPECT_EQ(wait.calls, 0);
  EXPECT_EQ(kv_.waiter_count(), 0u);
}

TEST_F(GangKvTest, WaitLimitAndWaitErrors) {
  WaitResult a;
  WaitResult b;
  WaitResult c;
  kv_.Wait(kAlice, "k", a.Callback());
  kv_.Wait(kAlice, "j", b.Callback());
  EXPECT_EQ(kv_.Wait(kAlice, "k", c.Callback()), 0u);
  EXPECT_EQ(c.value.status().code(), absl::StatusCode::kResourceExhausted);
  KvCaller wrong = kAlice;
  wrong.token = "nope";
  WaitResult refused;
  EXPECT_EQ(kv_.Wait(wrong, "k", refused.Callback()), 0u);
  EXPECT_EQ(refused.value.status().code(), absl::StatusCode::kPermissionDenied);
  kv_.EndAllWaits("test over");  // Before `a` and `b` go away.
  EXPECT_EQ(a.value.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(GangKvTest, EndGangClearsDataAndAbortsWaits) {
  ASSERT_TRUE(kv_.Set(kAlice, "k", "v").ok());
  WaitResult wait;
  kv_.Wait(kAlice, "other", wait.Callback());
  kv_.EndGang("gang-a");
  kv_.EndGang("gang-a");  // Idempotent.
  EXPECT_EQ(wait.calls, 1);
  EXPECT_EQ(wait.value.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(wait.value.status().message(), HasSubstr("gang gang-a ended"));
  EXPECT_EQ(kv_.Get(kAlice, "k").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(kv_.gang_count(), 1u);
  EXPECT_EQ(kv_.waiter_count(), 0u);
  // The same gang admitted again starts empty.
  kv_.OpenGang(kAlice.gang_id, kAlice.epoch, kAlice.token);
  EXPECT_EQ(kv_.Get(kAlice, "k").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(GangKvTest, EndAllWaitsReportsUnavailable) {
  WaitResult wait;
  kv_.Wait(kAlice, "k", wait.Callback());
  kv_.EndAllWaits("shutting down");
  EXPECT_EQ(wait.value.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(GangKvTest, CompareAndSetSemantics) {
  absl::StatusOr<KvCasResult> created =
      kv_.CompareAndSet(kAlice, "k", std::nullopt, "a");
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(created->swapped);
  EXPECT_EQ(created->current, "a");

  absl::StatusOr<KvCasResult> not_absent =
      kv_.CompareAndSet(kAlice, "k", std::nullopt, "b");
  EXPECT_FALSE(not_absent->swapped);
  EXPECT_EQ(not_absent->current, "a");

  absl::StatusOr<KvCasResult> mismatch =
      kv_.CompareAndSet(kAlice, "k", "x", "b");
  EXPECT_FALSE(mismatch->swapped);
  EXPECT_EQ(mismatch->current, "a");
  EXPECT_EQ(*kv_.Get(kAlice, "k"), "a");

  absl::StatusOr<KvCasResult> swapped =
      kv_.CompareAndSet(kAlice, "k", "a", "b");
  EXPECT_TRUE(swapped->swapped);
  EXPECT_EQ(*kv_.Get(kAlice, "k"), "b");

  absl::StatusOr<KvCasResult> absent =
      kv_.CompareAndSet(kAlice, "none", "a", "b");
  EXPECT_FALSE(absent->swapped);
  EXPECT_EQ(absent->current, std::nullopt);
  EXPECT_EQ(
      kv_.CompareAndSet(kAlice, "k", "b", std::string(21, 'x')).status().code(),
      absl::StatusCode::kResourceExhausted);
}

TEST_F(GangKvTest, AddCountsAndRejectsNonIntegers) {
  EXPECT_EQ(*kv_.Add(kAlice, "n", 3), 3);
  EXPECT_EQ(*kv_.Add(kAlice, "n", -5), -2);
  EXPECT_EQ(*kv_.Get(kAlice, "n"), "-2");
  ASSERT_TRUE(kv_.Set(kAlice, "s", "abc").ok());
  absl::StatusOr<int64_t> text = kv_.Add(kAlice, "s", 1);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(text.status().message(), HasSubstr("not a decimal integer"));
  ASSERT_TRUE(kv_.Set(kAlice, "m", "9223372036854775807").ok());
  EXPECT_EQ(kv_.Add(kAlice, "m", 1).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(GangKvConcurrencyTest, ConcurrentAddsAndWaitsAgree) {
  GangKv kv;
  kv.OpenGang(kAlice.gang_id, kAlice.epoch, kAlice.token);
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 200;
  std::vector<WaitResult> waits(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&kv, &waits, t] {
      kv.Wait(kAlice, "done", waits[t].Callback());
      for (int i = 0; i < kAddsPerThread; ++i) {
        ASSERT_TRUE(kv.Add(kAlice, "n", 1).ok());
      }
      if (*kv.Add(kAlice, "finished", 1) == kThreads) {
        ASSERT_TRUE(kv.Set(kAlice, "done", "yes").ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(*kv.Get(kAlice, "n"), std::to_string(kThreads * kAddsPerThread));
  for (const WaitResult& wait : waits) {
    EXPECT_EQ(wait.calls, 1);
    EXPECT_EQ(*wait.value, "yes");
  }
}

TEST(NewKvTokenTest, TokensAreLongAndDistinct) {
  absl::StatusOr<std::string> a = NewKvToken();
  absl::StatusOr<std::string> b = NewKvToken();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace gdt::kv
