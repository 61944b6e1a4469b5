// ScopedEnv: sets environment variables for a scope and restores them after. Tests only: the
// environment is process-wide, so use it on the test thread while no other thread reads it.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentd::test {

class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace agentd::test
