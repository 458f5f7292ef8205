#include "kv/gang_kv.h"

#include <charconv>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/secret.h"
#include "common/sha256.h"

namespace gdt::kv {
namespace {

// Compares without an early exit, so timing does not reveal the prefix that
// matched.
bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

GangKv::~GangKv() { EndAllWaits("coordinator is shutting down"); }

void GangKv::OpenGang(const std::string& gang_id, uint32_t epoch,
                      const std::string& token,
                      const std::map<uint32_t, std::string>& earlier_sha256) {
  Completions completions;
  {
    MutexLock lock(mu_);
    GangStore& store = gangs_[gang_id];
    std::map<uint32_t, std::string> earlier = std::move(store.earlier_sha256);
    for (const auto& [earlier_epoch, sha256] : earlier_sha256) {
      if (earlier_epoch < epoch) earlier[earlier_epoch] = sha256;
    }
    if (store.epoch == epoch && store.token == token) {
      store.earlier_sha256 = std::move(earlier);
    } else {
      if (store.epoch != 0) {
        EndWaits(store,
                 absl::AbortedError(
                     absl::StrCat("gang ", gang_id, " moved to epoch ", epoch)),
                 completions);
        if (store.epoch < epoch) {
          earlier[store.epoch] = Sha256Hex(store.token);
        }
      }
      total_bytes_ -= store.bytes;
      store = GangStore();
      store.epoch = epoch;
      store.token = token;
      store.earlier_sha256 = std::move(earlier);
    }
    while (store.earlier_sha256.size() > kMaxEarlierTokens) {
      store.earlier_sha256.erase(store.earlier_sha256.begin());
    }
  }
  Run(std::move(completions));
}

void GangKv::EndGang(const std::string& gang_id) {
  Completions completions;
  {
    MutexLock lock(mu_);
    auto it = gangs_.find(gang_id);
    if (it == gangs_.end()) return;
    EndWaits(it->second,
             absl::AbortedError(absl::StrCat("gang ", gang_id, " ended")),
             completions);
    total_bytes_ -= it->second.bytes;
    gangs_.erase(it);
  }
  Run(std::move(completions));
}

void GangKv::EndAllWaits(const std::string& why) {
  Completions completions;
  {
    MutexLock lock(mu_);
    for (auto& [gang_id, store] : gangs_) {
      EndWaits(store, absl::UnavailableError(why), completions);
    }
  }
  Run(std::move(completions));
}

absl::Status GangKv::CheckCaller(const KvCaller& caller) {
  MutexLock lock(mu_);
  return Authorize(caller, "-").status();
}

absl::StatusOr<GangKv::GangStore*> GangKv::Authorize(const KvCaller& caller,
                                                     const std::string& key) {
  if (caller.token.empty()) {
    return absl::UnauthenticatedError(
        "no gang token: set GDT_KV_TOKEN (the executor exports it to every "
        "member)");
  }
  // Whoever does not hold one of the gang's tokens hears the same whether
  // the gang exists or not, so that naming gangs tells nobody which exist.
  const absl::Status refused = absl::PermissionDeniedError(absl::StrCat(
      "wrong gang token for gang ", caller.gang_id, " epoch ", caller.epoch,
      ", or that gang has no key-value store (not admitted, or ended)"));
  auto it = gangs_.find(caller.gang_id);
  if (it == gangs_.end()) return refused;
  GangStore& store = it->second;
  if (!SameSecret(store.token, caller.token)) {
    const std::string sha256 = Sha256Hex(caller.token);
    for (const auto& [epoch, earlier] : store.earlier_sha256) {
      if (SameSecret(earlier, sha256)) {
        return absl::FailedPreconditionError(
            absl::StrCat("gang ", caller.gang_id, " is at epoch ", store.epoch,
                         "; the store of epoch ", epoch, " is gone"));
      }
    }
    return refused;
  }
  if (store.epoch != caller.epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat("gang ", caller.gang_id, " is at epoch ", store.epoch,
                     "; the store of epoch ", caller.epoch, " is gone"));
  }
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes is longer than the limit ",
                     limits_.max_key_bytes));
  }
  return &store;
}

absl::Status GangKv::Put(GangStore& store, const std::string& gang_id,
                         const std::string& key, std::string value,
                         Completions& completions) {
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "value of ", value.size(), " bytes for key '", key,
        "' is above the limit of ", limits_.max_value_bytes, " bytes"));
  }
  auto it = store.values.find(key);
  const size_t old_bytes =
      it == store.values.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  if (limits_.max_bytes_total > 0 && new_bytes > old_bytes &&
      store.bytes - old_bytes + new_bytes > limits_.guaranteed_bytes_per_gang &&
      total_bytes_ - old_bytes + new_bytes > limits_.max_bytes_total) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the key-value stores of all gangs hold ", total_bytes_,
        " bytes, the coordinator's limit is ", limits_.max_bytes_total,
        " (kv_max_total_mib), and gang ", gang_id, " holds ", store.bytes,
        " (beyond the ", limits_.guaranteed_bytes_per_gang,
        " every gang may hold); cannot store ", value.size(), " bytes at key '",
        key, "'"));
  }
  if (it == store.values.end()) {
    // gdt's own keys have their own quota, so a store the user filled never
    // drops the checkpoint notice or an NCCL unique id.
    const bool own = absl::StartsWith(key, kGdtKeyPrefix);
    if (own && store.gdt_keys >= limits_.max_gdt_keys_per_gang) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "gang ", gang_id, " already has ", store.gdt_keys, " keys under ",
          kGdtKeyPrefix, ", the limit; cannot add '", key, "'"));
    }
    const size_t user_keys = store.values.size() - store.gdt_keys;
    if (!own && user_keys >= limits_.max_keys_per_gang) {
      return absl::ResourceExhaustedError(
          absl::StrCat("gang ", gang_id, " already has ", user_keys,
                       " keys, the limit; cannot add '", key, "'"));
    }
    it = store.values.emplace(key, std::string()).first;
    if (own) ++store.gdt_keys;
  }
  it->second = std::move(value);
  store.bytes = store.bytes - old_bytes + new_bytes;
  total_bytes_ = total_bytes_ - old_bytes + new_bytes;
  auto waiting = store.waiting.find(key);
  if (waiting != store.waiting.end()) {
    for (uint64_t handle : waiting->second) {
      auto waiter = waiters_.find(handle);
      if (waiter == waiters_.end()) continue;
      completions.emplace_back(std::move(waiter->second.done), it->second);
      waiters_.erase(waiter);
      --store.waiter_count;
    }
    store.waiting.erase(waiting);
  }
  return absl::OkStatus();
}

void GangKv::EndWaits(GangStore& store, const absl::Status& status,
                      Completions& completions) {
  for (auto& [key, handles] : store.waiting) {
    for (uint64_t handle : handles) {
      auto waiter = waiters_.find(handle);
      if (waiter == waiters_.end()) continue;
      completions.emplace_back(std::move(waiter->second.done), status);
      waiters_.erase(waiter);
    }
  }
  store.waiting.clear();
  store.waiter_count = 0;
}

void GangKv::Run(Completions completions) {
  for (auto& [done, result] : completions) done(std::move(result));
}

absl::Status GangKv::Set(const KvCaller& caller, const std::string& key,
                         std::string value) {
  Completions completions;
  absl::Status status;
  {
    MutexLock lock(mu_);
    absl::StatusOr<GangStore*> store = Authorize(caller, key);
    if (!store.ok()) return store.status();
    status = Put(**store, caller.gang_id, key, std::move(value), completions);
  }
  Run(std::move(completions));
  return status;
}

absl::StatusOr<std::string> GangKv::Get(const KvCaller& caller,
                                        const std::string& key) {
  MutexLock lock(mu_);
  absl::StatusOr<GangStore*> store = Authorize(caller, key);
  if (!store.ok()) return store.status();
  auto it = (*store)->values.find(key);
  if (it == (*store)->values.end()) {
    return absl::NotFoundError(absl::StrCat("no key '", key, "'"));
  }
  return it->second;
}

uint64_t GangKv::Wait(const KvCaller& caller, const std::string& key,
                      WaitCallback done) {
  absl::StatusOr<std::string> now;
  {
    MutexLock lock(mu_);
    absl::StatusOr<GangStore*> store = Authorize(caller, key);
    if (!store.ok()) {
      now = store.status();
    } else if (auto it = (*store)->values.find(key);
               it != (*store)->values.end()) {
      now = it->second;
    } else if ((*store)->waiter_count >= limits_.max_waiters_per_gang) {
      now = absl::ResourceExhaustedError(
          absl::StrCat("gang ", caller.gang_id, " already has ",
                       (*store)->waiter_count, " pending waits, the limit"));
    } else {
      const uint64_t handle = next_handle_++;
      waiters_[handle] = Waiter{caller.gang_id, key, std::move(done)};
      (*store)->waiting[key].push_back(handle);
      ++(*store)->waiter_count;
      return handle;
    }
  }
  done(std::move(now));
  return 0;
}

void GangKv::CancelWait(uint64_t handle) {
  WaitCallback dropped;  // Destroyed without the lock held.
  MutexLock lock(mu_);
  auto waiter = waiters_.find(handle);
  if (waiter == waiters_.end()) return;
  auto gang = gangs_.find(waiter->second.gang_id);
  if (gang != gangs_.end()) {
    auto waiting = gang->second.waiting.find(waiter->second.key);
    if (waiting != gang->second.waiting.end()) {
      std::erase(waiting->second, handle);
      if (waiting->second.empty()) gang->second.waiting.erase(waiting);
    }
    --gang->second.waiter_count;
  }
  dropped = std::move(waiter->second.done);
  waiters_.erase(waiter);
}

absl::StatusOr<KvCasResult> GangKv::CompareAndSet(
    const KvCaller& caller, const std::string& key,
    const std::optional<std::string>& expected, std::string desired) {
  Completions completions;
  KvCasResult result;
  {
    MutexLock lock(mu_);
    absl::StatusOr<GangStore*> store = Authorize(caller, key);
    if (!store.ok()) return store.status();
    auto it = (*store)->values.find(key);
    std::optional<std::string> current;
    if (it != (*store)->values.end()) current = it->second;
    if (current != expected) {
      result.current = std::move(current);
      return result;
    }
    result.current = desired;
    absl::Status status =
        Put(**store, caller.gang_id, key, std::move(desired), completions);
    if (!status.ok()) return status;
    result.swapped = true;
  }
  Run(std::move(completions));
  return result;
}

absl::StatusOr<int64_t> GangKv::Add(const KvCaller& caller,
                                    const std::string& key, int64_t delta) {
  Completions completions;
  int64_t sum = 0;
  {
    MutexLock lock(mu_);
    absl::StatusOr<GangStore*> store = Authorize(caller, key);
    if (!store.ok()) return store.status();
    int64_t value = 0;
    auto it = (*store)->values.find(key);
    if (it != (*store)->values.end()) {
      const std::string& text = it->second;
      const auto [end, error] =
          std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "key '", key, "' holds '", absl::CHexEscape(text.substr(0, 32)),
            "', not a decimal integer"));
      }
    }
    if (__builtin_add_overflow(value, delta, &sum)) {
      return absl::OutOfRangeError(absl::StrCat(
          "adding ", delta, " to ", value, " at key '", key, "' overflows"));
    }
    absl::Status status =
        Put(**store, caller.gang_id, key, absl::StrCat(sum), completions);
    if (!status.ok()) return status;
  }
  Run(std::move(completions));
  return sum;
}

size_t GangKv::gang_count() {
  MutexLock lock(mu_);
  return gangs_.size();
}

size_t GangKv::total_bytes() {
  MutexLock lock(mu_);
  return total_bytes_;
}

size_t GangKv::waiter_count() {
  MutexLock lock(mu_);
  return waiters_.size();
}

absl::StatusOr<std::string> NewKvToken() { return NewSecretToken(); }

}  // namespace gdt::kv
