// The A2A tasks the gateway has made, in memory: bounded, and forgetting finished tasks after a
// while. Any thread (one mutex; every operation is a map lookup or a short scan).
//
// A task is one agent call (a SendMessage or SendStreamingMessage): working while the call runs,
// then completed (the reply is its artifact), failed (the agent's typed error is its status
// message) or canceled. Canceling marks the task canceled; the agent call itself cannot be
// stopped (agentd has no way to), and its answer, when it comes, is dropped.
//
// Bounds: at most `capacity` tasks; a new one evicts the finished task updated longest ago, and
// is refused when every task held is still working.
//
// Streams listen to a working task (subscribe): they are told each piece of the reply and the
// end, including a cancel, which ends them at once. A finished task is forgotten `ttl` after it
// finished (GetTask then says TaskNotFound, as the spec allows for purged tasks).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gateway::a2a {

enum class TaskState { working, completed, failed, canceled };
// "TASK_STATE_WORKING", ... (ProtoJSON enum names); nullopt for a name this store never holds
// or does not know.
const char* state_name(TaskState s);
std::optional<TaskState> state_from_name(const std::string& name);
inline bool is_terminal(TaskState s) { return s != TaskState::working; }

struct Task {
  std::string id;
  std::string context_id;
  std::string agent;  // the exposed agent it belongs to
  TaskState state = TaskState::working;
  nlohmann::json request;                         // the client's Message (history[0])
  std::string reply;                              // the agent's reply so far (the artifact's text)
  nlohmann::json status_message;                  // a Message from the agent with the status, or null
  std::chrono::system_clock::time_point updated;  // the status timestamp
  std::uint64_t seq = 0;                          // order of the last update (ties of `updated` broken by it)
};

// Told of a working task's progress (streams: SendStreamingMessage's and SubscribeToTask's):
// chunk is a piece of the reply, or null when the task has just ended (t is then final, and the
// listener is dropped). Called with the store's lock held, in the order of the updates: it must
// be quick and must not call the store (queuing an SSE event is what it is for).
using Listener = std::function<void(const Task& t, const std::string* chunk)>;

struct ListQuery {
  std::string agent;
  std::string context_id;          // empty: any
  std::optional<TaskState> state;  // nullopt: any
  std::optional<std::chrono::system_clock::time_point> updated_after;
  std::size_t page_size = 50;
  std::string page_token;  // empty: the first page
};

struct ListPage {
  std::vector<Task> tasks;
  std::string next_page_token;  // empty on the last page
  std::size_t total = 0;        // tasks matching, before paging
};

class TaskStore {
 public:
  // A random UUID (version 4): task ids, and the context ids made for messages without one.
  static std::string new_id();
  TaskStore(std::size_t capacity, std::chrono::seconds ttl) : capacity_(capacity), ttl_(ttl) {}

  // Adds a working task (id and context id made here when empty; updated set). nullopt when
  // the store is full of working tasks.
  std::optional<Task> create(std::string agent, std::string context_id, nlohmann::json request);
  // The task with this id belonging to agent.
  std::optional<Task> get(const std::string& agent, const std::string& id);
  // Appends a piece of the reply to a working task; false when it is no longer working.
  bool append(const std::string& id, const std::string& text);
  // Ends a working task: completed with the reply text, or failed with a status message. A task
  // no longer working is left as it is. Returns the task as it now is (nullopt if forgotten).
  std::optional<Task> finish(const std::string& id, TaskState state, std::optional<std::string> reply,
                             nlohmann::json status_message);
  // Cancels a working task of agent. The task as it now is, with true when it was canceled now
  // (false: it had finished already); nullopt when there is none.
  std::optional<std::pair<Task, bool>> cancel(const std::string& agent, const std::string& id);
  // Listens to a task of agent: when it is working, snapshot(task) runs first and listener is
  // kept until the task ends (both under the lock, so nothing is missed or told twice). Returns
  // the task as it is (nullopt: none); a finished task takes no listener.
  std::optional<Task> subscribe(const std::string& agent, const std::string& id,
                                const std::function<void(const Task&)>& snapshot, Listener listener);
  // Tasks of query.agent, the most recently updated first, one page.
  ListPage list(const ListQuery& query);

  std::size_t size();

 private:
  using Key = std::pair<std::chrono::system_clock::time_point, std::uint64_t>;  // (updated, seq)
  void touch(Task& t);                                                          // mu_ held
  void expire();                                                                // mu_ held
  void tell_end(const Task& t);  // mu_ held: the listeners of a task that has just ended

  const std::size_t capacity_;
  const std::chrono::seconds ttl_;
  std::mutex mu_;
  std::unordered_map<std::string, Task> tasks_;  // guarded by mu_
  std::map<Key, std::string> by_update_;         // guarded by mu_: every task by its last update
  std::uint64_t seq_ = 0;                        // guarded by mu_
  std::unordered_map<std::string, std::vector<Listener>> listeners_;  // guarded by mu_: of working tasks
};

}  // namespace gateway::a2a
