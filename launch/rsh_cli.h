#ifndef GDT_LAUNCH_RSH_CLI_H_
#define GDT_LAUNCH_RSH_CLI_H_

#include <functional>
#include <map>
#include <ostream>
#include <string>

namespace gdt::launch {

// gdt-rsh (docs/launchers/mpi.md), a remote shell without sshd or keys:
//   gdt-rsh [ssh options] HOST COMMAND...  runs COMMAND (joined by spaces,
//       under /bin/sh -c, as ssh does) in the gang member on HOST through
//       that host's gdt-agent, authorised by GDT_KV_TOKEN; streams its
//       output and exits with its code (255: could not run it). Once
//       `stop_requested` turns non-zero (SIGTERM, SIGINT, SIGHUP) the call is
//       cancelled, the agent stops the command, and gdt-rsh returns
//       128 + that signal.
//   gdt-rsh --serve   publishes this member's agent (gang store key
//       gdt/rsh/agent/<GDT_SELF_ADDR>) and stays up until signalled.
//   gdt-rsh --ready   exits 0 once every address in GDT_PEERS is published.
// `stop_requested` returns the signal number once gdt-rsh should end, else
// 0.
int RunRshCli(int argc, char** argv,
              const std::map<std::string, std::string>& env,
              const std::function<int()>& stop_requested, std::ostream& out,
              std::ostream& err);

}  // namespace gdt::launch

#endif  // GDT_LAUNCH_RSH_CLI_H_
