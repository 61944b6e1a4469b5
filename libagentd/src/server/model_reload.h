// Model configs that replace a running server's (SIGHUP re-reading --model-config-path, and
// AgentServer.setModelConfigs, e.g. `agentctl reload --file`).
//
// A reload must not drop every model by accident: a document with no configs in it (an empty or
// truncated file, only comments, a YAML null) is refused while the server has configs of its
// own, with an Error(config_error) that says so and that the current configs are kept. An
// explicit empty list (`[]`) removes them all on purpose. Pure functions; any thread.
#pragma once

#include "model_config.h"

#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

// The configs text (named source in messages) holds, to replace `loaded` (the config names the
// server has besides the built-in echo). Throws Error(config_error) for a bad document, or an
// empty one while loaded is not empty.
std::vector<ModelConfig> configs_for_reload(std::string_view text, std::string_view source,
                                            const std::vector<std::string>& loaded);

// The same for the file at path (a file that cannot be read: Error(config_error) naming it).
std::vector<ModelConfig> read_configs_for_reload(const std::string& path,
                                                 const std::vector<std::string>& loaded);

}  // namespace agentd::detail
