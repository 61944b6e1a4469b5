// The error of a failed system call on a file of the host layer's own (the commit log, the run
// journal): "PATH: cannot write: No space left on device", errno's reason last. Call it right
// after the failing call, before anything else can change errno.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace agentd::detail {

inline std::runtime_error file_error(const std::string& path, const char* what) {
  return std::runtime_error(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}

}  // namespace agentd::detail
