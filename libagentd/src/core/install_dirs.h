// Where agentd's own files are, found from the libagentd that is loaded (dladdr), so that a
// build tree, an installed prefix and a tree moved elsewhere all work without configured paths.
#pragma once

#include <filesystem>
#include <vector>

namespace agentd::detail {

// The directory of the loaded libagentd (its libdir), or empty when it cannot be told.
std::filesystem::path libagentd_dir();

// Where the plugins shipped with agentd are, in the order to look: <libdir>/agentd/plugins (an
// install) and <libdir>/../plugins (a build tree). Empty when libagentd_dir() is.
std::vector<std::filesystem::path> shipped_plugin_dirs();

}  // namespace agentd::detail
