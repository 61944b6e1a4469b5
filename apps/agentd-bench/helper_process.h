// The bench's helper servers (`agentd-bench --serve-model`, `--serve-echo`): started as child
// processes of the bench by re-running its own executable, they print "PORT ..." once listening
// and stop when the bench closes their stdin.
#pragma once

#include "subprocess.h"

#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <string>
#include <vector>

namespace agentd::bench {

// A helper started with `/proc/self/exe args...` (stdin and stdout piped to this process), and
// the line it printed when it began listening ("PORT ..."). Throws std::runtime_error, naming
// what, when it does not start or says something else first.
struct HelperProcess {
  detail::Subprocess process;
  std::string port_line;
};
HelperProcess start_helper(std::vector<std::string> args, const std::string& what);

// Closes the helper's stdin (it stops and reports) and waits for it; SIGKILL after 5 s.
void stop_helper(HelperProcess& helper);

// In a helper: SIGTERM and SIGINT are delivered to its KJ loop. Call first in main's thread,
// before setupAsyncIo and before any thread starts (threads inherit the blocked signals).
void capture_stop_signals();
// In a helper: resolves on SIGTERM or SIGINT (captured with capture_stop_signals), or when its
// stdin, a parent's pipe, reaches its end (the parent closed it or is gone). A helper run by hand,
// whose stdin is no pipe, stops on a signal only.
kj::Promise<void> told_to_stop(kj::AsyncIoContext& io);

}  // namespace agentd::bench
