#ifndef GDT_COORDINATOR_STATUS_COMMAND_H_
#define GDT_COORDINATOR_STATUS_COMMAND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "gdt/v1/coordinator.pb.h"
#include "rendezvous/channel.h"

namespace gdt::rendezvous {
class CoordinatorClient;
}  // namespace gdt::rendezvous

namespace gdt::ctl {

// Human output of `gdt-coord status` never exceeds this many columns.
inline constexpr size_t kStatusWidth = 100;

// Rows the text views show by default (`--limit`); JSON is always complete.
inline constexpr size_t kDefaultRowLimit = 50;

struct StatusOptions {
  bool json = false;
  bool all = false;  // Also finished gangs (done, and failed and left).
  std::string gang;  // Non-empty: the detail of this gang (id or prefix).
  // Text: at most this many hosts and this many gangs (0 = all), each list
  // then ending in "... and K more (use --limit 0 or --json)".
  size_t limit = kDefaultRowLimit;
  // JSON: the whole document on one line (JSON Lines, as --watch --json
  // prints a frame), not indented.
  bool one_line = false;
};

// The line that ends a list cut to its limit, for `more` rows left out.
std::string MoreRowsLine(size_t more);

// `gdt-coord status [GANG]`: asks the coordinator at `endpoint` for its
// state and returns the text to print (or JSON).
// Errors: Unavailable "cannot reach coordinator at ADDR: <reason>";
// NotFound "no gang 'X' ..." and InvalidArgument "'X' matches N gangs ..."
// for a GANG that names no gang or several.
// `security`: TLS towards the coordinator; plaintext by default.
// `admin_token` (may be empty) is presented as operator credentials;
// Unauthenticated/PermissionDenied when the coordinator wants it.
absl::StatusOr<std::string> RunStatusCommand(
    const std::string& endpoint, const StatusOptions& options,
    const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "");

// The pure part of RunStatusCommand, for a response already fetched.
absl::StatusOr<std::string> RenderStatus(const v1::GetStatusResponse& status,
                                         const StatusOptions& options,
                                         int64_t now_unix_ms);

// `--watch`: every `interval`, fetches the status with `fetch`, renders it
// like RenderStatus and writes one frame to `out` (after the ANSI
// clear-screen sequence when `clear`, else after a blank line). A failed
// fetch writes its one-line error as the frame and the watch goes on.
// With options.json every frame is one line holding one JSON object (JSON
// Lines; never a clear-screen sequence or blank line), a failed fetch
// {"error": "<its one-line error>"}.
// Stops after `count` frames (0 = no limit) or when `wait(interval)` returns
// true (interrupted). Returns the last frame's error, if any.
struct WatchOptions {
  std::chrono::milliseconds interval{2000};
  int count = 0;
  bool clear = false;
};
absl::Status WatchStatus(
    const std::function<absl::StatusOr<v1::GetStatusResponse>()>& fetch,
    const StatusOptions& options, const WatchOptions& watch, std::ostream& out,
    const std::function<bool(std::chrono::milliseconds)>& wait);

// Every page of the coordinator's status (GetStatus answers in pages of
// about 1 MiB) merged into one answer; a gang that moved between pages is
// kept once. Errors: those of the calls, as they are.
absl::StatusOr<v1::GetStatusResponse> FetchAllPages(
    rendezvous::CoordinatorClient& client, bool include_finished);

// Fetches the status (finished gangs included) from `endpoint`.
// Errors: Unavailable "cannot reach coordinator at ADDR: <reason>".
absl::StatusOr<v1::GetStatusResponse> FetchStatus(
    const std::string& endpoint,
    const rendezvous::ClientSecurity& security = {},
    const std::string& admin_token = "");

// The overview: a CLUSTER summary, HOSTS, GANGS grouped by state with their
// members, waiting reasons and ages, and RECENT FAILURES with their root
// cause. `all` adds finished gangs to GANGS. Lines fit kStatusWidth.
// `limit`: at most this many rows in HOSTS and in GANGS (0 = all).
std::string RenderStatusText(const v1::GetStatusResponse& status,
                             int64_t now_unix_ms, bool all = false,
                             size_t limit = 0);

// One gang in detail (every member, full reason), fitting kStatusWidth.
std::string RenderGangText(const v1::GangStatus& gang, int64_t now_unix_ms);

// {"summary":{...},"hosts":[...],"gangs":[...],"recent_failures":[...]},
// indented, or on one line with `one_line`; ends in a newline.
std::string RenderStatusJson(const v1::GetStatusResponse& status,
                             bool all = true, bool one_line = false);

// One gang as JSON (the same object as in "gangs").
std::string RenderGangJson(const v1::GangStatus& gang, bool one_line = false);

// "up", "down", "drained" or "unknown", as status and `hosts` print it.
std::string HostStateName(v1::HostState state);
// The state shown in tables: "not ready" for a host whose agent reports that
// it cannot take new members, else HostStateName.
std::string HostStateText(const v1::HostStatus& host);
// One line per host whose agent is not ready: "host NAME not ready: REASON",
// safe for a terminal; empty when none.
std::string NotReadyLines(const v1::GetStatusResponse& status);

}  // namespace gdt::ctl

#endif  // GDT_COORDINATOR_STATUS_COMMAND_H_
