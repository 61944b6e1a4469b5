#include "install_dirs.h"

#include <dlfcn.h>

#include <cstring>
#include <system_error>

namespace agentd::detail {

std::filesystem::path libagentd_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&libagentd_dir), &info) == 0 || info.dli_fname == nullptr ||
      std::strchr(info.dli_fname, '/') == nullptr)
    return {};
  std::error_code ec;
  auto lib = std::filesystem::weakly_canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path() : lib.parent_path();
}

std::vector<std::filesystem::path> shipped_plugin_dirs() {
  auto lib = libagentd_dir();
  if (lib.empty()) return {};
  return {lib / "agentd" / "plugins", (lib.parent_path() / "plugins")};
}

}  // namespace agentd::detail
