#include "task_errors.h"

#include <spdlog/spdlog.h>

namespace agentd::detail {

void TaskErrors::taskFailed(kj::Exception&& e) {
  if (e.getType() == kj::Exception::Type::DISCONNECTED) return;
  spdlog::log(level_, "{} failed: {}", what_, e.getDescription().cStr());
}

}  // namespace agentd::detail
