// TaskErrors: the one kj::TaskSet error handler, for background tasks on a KJ loop whose failure
// has no caller left to tell. A lost connection is part of normal life and stays quiet; any
// other failure is logged at `level`, naming what failed. Tasks whose failure matters to a
// caller report it through the caller's own state and never reach this.
#pragma once

#include <kj/async.h>
#include <spdlog/common.h>

namespace agentd::detail {

class TaskErrors final : public kj::TaskSet::ErrorHandler {
 public:
  // what: a static string naming the tasks, e.g. "server task", "peer connection".
  explicit TaskErrors(const char* what, spdlog::level::level_enum level = spdlog::level::warn)
      : what_(what), level_(level) {}
  void taskFailed(kj::Exception&& e) override;

 private:
  const char* what_;
  spdlog::level::level_enum level_;
};

}  // namespace agentd::detail
