// Fuzzes agentd-gateway's --config parser (apps/agentd-gateway/exposure_config): the input is the
// file's text. The contract: an ExposureConfig whose entries are valid (a name, exactly one of
// agent and class, positive limits), or a ConfigError naming the file; no exception escapes.
#include "exposure_config.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <variant>

namespace {

[[noreturn]] void invariant_failed(const char* what) {
  std::fprintf(stderr, "gateway_config_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = gateway::parse_exposure_config(text, "fuzz.yaml");
  if (auto* e = std::get_if<gateway::ConfigError>(&r)) {
    if (e->message.rfind("fuzz.yaml", 0) != 0) invariant_failed("an error that does not name the file");
    return 0;
  }
  const auto& c = std::get<gateway::ExposureConfig>(r);
  if (c.entries.empty()) invariant_failed("a config without entries was accepted");
  std::set<std::string> names;
  for (const auto& e : c.entries) {
    if (e.name.empty() || !names.insert(e.name).second) invariant_failed("an empty or repeated name");
    if (e.agent.empty() == e.agent_class.empty())
      invariant_failed("an entry with both or neither of agent and class");
    if (e.idle_timeout.count() <= 0 || e.max_conversations == 0)
      invariant_failed("a limit that is not positive");
    if (!e.args.is_object()) invariant_failed("args that are not an object");
    if (c.find(e.name) != &e) invariant_failed("find() does not find an entry");
    for (const auto& s : e.skills) (void)gateway::skill_json(s).dump();
  }
  return 0;
}
