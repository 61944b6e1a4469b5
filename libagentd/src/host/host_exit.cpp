// AgentHost::remove_all_at_exit (agent_host.h): the server's exit path for its agents.
//
// remove_all() deletes agents one by one, as a client's deleteAllAgents must (each deletion
// recorded, each agent's model usage forgotten, one destructor task each). At exit none of that
// is needed, and with a million agents it took seconds after "stopped": a million searches of
// the usage map, a million formatted error messages, a million pool tasks contending for the
// pool's lock. Here the agents leave the map at once and their destructors run in a few large
// tasks, one per lifecycle thread.
#include "agent_host.h"

#include "mailbox.h"
#include "worker_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <vector>

namespace agentd::detail {

void AgentHost::remove_all_at_exit() {
  std::unordered_map<std::string, std::shared_ptr<AgentSlot>> agents;
  // The idle agents and their slots, destroyed by the tasks below (in parallel).
  struct Gone {
    std::unique_ptr<Agent> agent;
    std::shared_ptr<AgentSlot> slot;
  };
  auto idle = std::make_shared<std::vector<Gone>>();
  {
    Locked lock(*this);
    agents.swap(agents_);
    dense_.clear();
    idle->reserve(agents.size());
    for (auto& [id, slot] : agents) {
      slot->removed = true;
      auto queued = mailboxes_.take_waiting(*slot);
      if (!queued.empty()) {
        Error e(ErrorCode::stopping, "the server is shutting down; this call did not run", id,
                slot->class_name);
        for (auto& c : queued) fail(c, e);
      }
      // A busy agent (a call still running) is destroyed when the call returns (finish_call).
      if (!slot->busy && slot->agent) idle->push_back(Gone{std::move(slot->agent), slot});
    }
  }
  agents.clear();  // the map, without the lock (the idle agents' slots go with them)
  if (idle->empty()) return;
  // Destructors are agent code: on the lifecycle pool, each task a contiguous share.
  const std::size_t parts = std::clamp<std::size_t>(idle->size() / 4096 + 1, 1, lifecycle_.max_threads());
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t from = idle->size() * p / parts;
    const std::size_t to = idle->size() * (p + 1) / parts;
    lifecycle_.submit([idle, from, to]() {
      for (std::size_t i = from; i < to; ++i) (*idle)[i] = Gone{};
    });
  }
}

}  // namespace agentd::detail
