// Fuzzes the model config loader (libagentd/src/models/model_config*.cpp): the input is a
// document as --model-config-path or setModelConfigs would carry it, read as YAML or, when it
// starts with '[' or '{', as JSON. The contract: a list of valid configs or agentd::Error
// (config_error) with a message; any other exception escapes and libFuzzer reports it.
#include "fuzz_support.h"
#include "model_config.h"

#include <agentd/error.h>

#include <cstdlib>
#include <string_view>

using namespace agentd;
using namespace agentd::detail;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // ${FUZZ_KEY} and friends resolve; others name a missing variable (both paths are exercised).
  ::setenv("FUZZ_KEY", "sk-fuzz", 1);
  ::setenv("FUZZ_URL", "http://127.0.0.1:9/v1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto configs = parse_model_configs(text, "fuzz");
    for (const auto& c : configs)
      if (c.config_name.empty()) fuzz::invariant_failed("a config without config_name was accepted");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::config_error) fuzz::invariant_failed("an error other than config_error");
    if (e.message().empty()) fuzz::invariant_failed("a config_error without a message");
  }
  return 0;
}
