#ifndef GDT_COORDINATOR_GANG_KV_H_
#define GDT_COORDINATOR_GANG_KV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace gdt::kv {

// The prefix of the keys gdt itself writes.
inline constexpr char kGdtKeyPrefix[] = "gdt/";

struct KvLimits {
  size_t max_value_bytes = 64 * 1024;
  size_t max_key_bytes = 512;
  // Keys outside kGdtKeyPrefix.
  size_t max_keys_per_gang = 1024;
  // Keys under kGdtKeyPrefix (gdt's own: the checkpoint notice, NCCL unique
  // ids), counted apart so that user keys never crowd them out.
  size_t max_gdt_keys_per_gang = 1024;
  size_t max_waiters_per_gang = 16384;
  // Keys and values of every gang together (each gang may hold up to
  // 2 x 1024 keys of 64 KiB, 128 MiB, so many admitted gangs could take
  // the coordinator's memory); 0 = no bound. A gang's first
  // guaranteed_bytes_per_gang are never refused for it, so that gangs that
  // fill the stores cannot keep another gang from its rendezvous keys and
  // NCCL ids: the stores hold at most max_bytes_total plus that much per
  // gang.
  size_t max_bytes_total = 1024 * 1024 * 1024;
  size_t guaranteed_bytes_per_gang = 1024 * 1024;
};

// Who makes a call: the gang, its epoch and the token its members hold.
struct KvCaller {
  std::string gang_id;
  uint32_t epoch = 0;
  std::string token;
};

struct KvCasResult {
  bool swapped = false;
  std::optional<std::string> current;  // The value after the call.
};

// The gang key-value store: one small in-memory map per admitted gang and
// epoch, usable only with that gang's token. The coordinator opens a gang's
// store when it admits the gang (OpenGang) and drops it when the gang has
// ended (EndGang). The data is not persisted: a coordinator restart empties
// every store (the tokens survive in the coordinator's state).
//
// Every operation checks the caller first. Errors common to all of them:
// Unauthenticated when the token is empty; PermissionDenied, one message
// whatever the reason, unless the token is the gang's (a wrong token, a gang
// never admitted or ended: a caller without the token cannot tell which
// gangs exist); FailedPrecondition when the token is the gang's current or
// an earlier epoch's but the epoch named is not the current one (the caller
// proved it was a member); InvalidArgument for an
// empty key or one longer than max_key_bytes; ResourceExhausted naming the
// limit for a value above max_value_bytes, a new key beyond
// max_keys_per_gang (max_gdt_keys_per_gang for keys under kGdtKeyPrefix),
// or a write that would take the keys and values of all gangs together
// above max_bytes_total.
//
// Thread-safe. Callbacks are never called with the store's lock held.
class GangKv {
 public:
  // Called once with the value of the key, or with the error that ended the
  // wait.
  using WaitCallback = std::function<void(absl::StatusOr<std::string>)>;

  explicit GangKv(KvLimits limits = {}) : limits_(limits) {}
  ~GangKv();  // Ends every pending wait with Unavailable.
  GangKv(const GangKv&) = delete;
  GangKv& operator=(const GangKv&) = delete;

  const KvLimits& limits() const { return limits_; }

  // Opens (or keeps) the store of `gang_id` at `epoch` with `token`. A newer
  // epoch replaces the older one's store; its waits end with Aborted, and
  // its token is kept (as its SHA-256) among the gang's earlier tokens.
  // `earlier_sha256` adds the SHA-256 (lowercase hex) of tokens of earlier
  // epochs, by epoch (what the coordinator kept across a restart). At most
  // kMaxEarlierTokens, the newest, are kept.
  static constexpr size_t kMaxEarlierTokens = 16;
  void OpenGang(const std::string& gang_id, uint32_t epoch,
                const std::string& token,
                const std::map<uint32_t, std::string>& earlier_sha256 = {});

  // Drops the gang's store; pending waits end with Aborted "gang ... ended".
  // Idempotent.
  void EndGang(const std::string& gang_id);

  // Ends every pending wait with Unavailable `why` (server shutdown).
  void EndAllWaits(const std::string& why);

  absl::Status Set(const KvCaller& caller, const std::string& key,
                   std::string value);

  // Errors: NotFound when the key does not exist.
  absl::StatusOr<std::string> Get(const KvCaller& caller,
                                  const std::string& key);

  // Calls `done` with the key's value as soon as it exists (at once when it
  // does), or with the error that ends the wait: the common errors,
  // ResourceExhausted beyond max_waiters_per_gang, Aborted when the gang
  // ends or moves to a new epoch, Unavailable on shutdown. Returns a handle
  // for CancelWait, or 0 when `done` was called already.
  uint64_t Wait(const KvCaller& caller, const std::string& key,
                WaitCallback done);

  // Forgets a pending wait without calling its callback (the caller gave
  // up, e.g. its deadline passed). Unknown handles are fine.
  void CancelWait(uint64_t handle);

  // Sets `key` to `desired` when its value is `expected` (unset: when the
  // key does not exist). Returns whether it did and the value afterwards.
  absl::StatusOr<KvCasResult> CompareAndSet(
      const KvCaller& caller, const std::string& key,
      const std::optional<std::string>& expected, std::string desired);

  // Adds `delta` to the decimal integer at `key` (absent counts as 0) and
  // returns the new value. Errors: FailedPrecondition when the key holds
  // something else; OutOfRange on overflow.
  absl::StatusOr<int64_t> Add(const KvCaller& caller, const std::string& key,
                              int64_t delta);

  // Checks the caller as every operation does (the common errors above):
  // other coordinator calls that a gang's token authorises use it.
  absl::Status CheckCaller(const KvCaller& caller);

  // For tests and status: open gangs and pending waits.
  size_t gang_count();
  // Bytes of keys and values that all gangs hold together.
  size_t total_bytes();
  size_t waiter_count();

 private:
  struct Waiter {
    std::string gang_id;
    std::string key;
    WaitCallback done;
  };
  struct GangStore {
    uint32_t epoch = 0;
    std::string token;
    // SHA-256 (hex) of the tokens of earlier epochs, by epoch.
    std::map<uint32_t, std::string> earlier_sha256;
    std::map<std::string, std::string> values;
    size_t gdt_keys = 0;  // Keys of `values` under kGdtKeyPrefix.
    size_t bytes = 0;     // Keys and values of `values`.
    std::map<std::string, std::vector<uint64_t>> waiting;  // Key -> handles.
    size_t waiter_count = 0;
  };
  using Completions =
      std::vector<std::pair<WaitCallback, absl::StatusOr<std::string>>>;

  // Checks the caller and key; returns the caller's store.
  absl::StatusOr<GangStore*> Authorize(const KvCaller& caller,
                                       const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores `value`, collecting the key's waiters into `completions`.
  absl::Status Put(GangStore& store, const std::string& gang_id,
                   const std::string& key, std::string value,
                   Completions& completions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every wait of `store` with `status`.
  void EndWaits(GangStore& store, const absl::Status& status,
                Completions& completions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Completions completions);

  const KvLimits limits_;
  Mutex mu_;
  std::map<std::string, GangStore> gangs_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // Sum of every store's `bytes`.
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
};

// A new random gang token: 32 bytes from the kernel's CSPRNG, hex-encoded.
// Errors: Internal when no randomness is available.
absl::StatusOr<std::string> NewKvToken();

}  // namespace gdt::kv

#endif  // GDT_COORDINATOR_GANG_KV_H_
