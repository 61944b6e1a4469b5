// Fuzzes the host:port parser (split_host_port) and the ready-line parser (parse_ready_line) of
// libagentd/src/core/child_process. They must never crash; what they accept must make sense: a
// port in 1..65535, and "host:port" written back parses to the same host and port.
#include "child_process.h"
#include "fuzz_support.h"

#include <string>

using namespace agentd::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  std::string host;
  std::uint16_t port = 0;
  if (split_host_port(text, host, port)) {
    if (port == 0) agentd::fuzz::invariant_failed("split_host_port accepted port 0");
    std::string again_host;
    std::uint16_t again_port = 0;
    if (!split_host_port(host + ":" + std::to_string(port), again_host, again_port) ||
        again_host != host || again_port != port)
      agentd::fuzz::invariant_failed("host:port written back does not parse the same");
  }

  std::string ready_host, server_id;
  std::uint16_t ready_port = 0;
  if (parse_ready_line(text, ready_host, ready_port, server_id) && ready_port == 0)
    agentd::fuzz::invariant_failed("parse_ready_line accepted port 0");
  return 0;
}
