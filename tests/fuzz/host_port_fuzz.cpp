// Fuzzes the endpoint parser (net::Endpoint) and the ready-line parser (net::parse_ready_line)
// of libagentd/src/net. They must never crash; what they accept must make sense: a port in
// 1..65535 (none for unix:PATH), and the endpoint written back parses to the same endpoint.
#include "endpoint.h"
#include "fuzz_support.h"
#include "ready_line.h"

#include <string>

using agentd::net::Endpoint;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  if (auto e = Endpoint::try_parse(text)) {
    if (!e->is_unix() && (e->port == 0 || e->host.empty()))
      agentd::fuzz::invariant_failed("Endpoint accepted port 0 or no host");
    auto again = Endpoint::try_parse(e->text());
    if (!again || *again != *e)
      agentd::fuzz::invariant_failed("an endpoint written back does not parse the same");
  }

  if (auto ready = agentd::net::parse_ready_line(text)) {
    if (!ready->endpoint.is_unix() && ready->endpoint.port == 0)
      agentd::fuzz::invariant_failed("parse_ready_line accepted port 0");
  }
  return 0;
}
