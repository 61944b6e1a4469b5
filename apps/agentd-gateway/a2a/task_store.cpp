#include "a2a/task_store.h"

#include <openssl/rand.h>

#include <cstdio>
#include <iterator>
#include <utility>

namespace gateway::a2a {

namespace {

constexpr const char* kStateNames[] = {"TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
                                       "TASK_STATE_CANCELED"};

// A random UUID (version 4).
std::string uuid4() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) throw std::runtime_error("RAND_bytes failed");
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  char out[37];
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

// A page token: the (updated, seq) of the last task of the page before, "NANOS.SEQ".
std::string token_of(std::chrono::system_clock::time_point t, std::uint64_t seq) {
  return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count()) +
         "." + std::to_string(seq);
}

bool parse_token(const std::string& s, std::chrono::system_clock::time_point& t, std::uint64_t& seq) {
  long long ns = 0;
  unsigned long long n = 0;
  int used = 0;
  if (std::sscanf(s.c_str(), "%lld.%llu%n", &ns, &n, &used) != 2 || used != static_cast<int>(s.size()))
    return false;
  t = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(ns)));
  seq = n;
  return true;
}

}  // namespace

const char* state_name(TaskState s) { return kStateNames[static_cast<int>(s)]; }

std::optional<TaskState> state_from_name(const std::string& name) {
  for (int i = 0; i < 4; ++i)
    if (name == kStateNames[i]) return static_cast<TaskState>(i);
  return std::nullopt;
}

std::string TaskStore::new_id() { return uuid4(); }

void TaskStore::touch(Task& t) {
  by_update_.erase(Key{t.updated, t.seq});
  t.updated = std::chrono::system_clock::now();
  t.seq = ++seq_;
  by_update_.emplace(Key{t.updated, t.seq}, t.id);
}

void TaskStore::expire() {
  const auto cutoff = std::chrono::system_clock::now() - ttl_;
  for (auto it = by_update_.begin(); it != by_update_.end() && it->first.first < cutoff;) {
    auto t = tasks_.find(it->second);
    if (t != tasks_.end() && is_terminal(t->second.state)) {
      tasks_.erase(t);
      it = by_update_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<Task> TaskStore::create(std::string agent, std::string context_id, nlohmann::json request) {
  Task t;
  t.id = new_id();
  t.context_id = context_id.empty() ? new_id() : std::move(context_id);
  t.agent = std::move(agent);
  t.request = std::move(request);
  std::lock_guard lock(mu_);
  expire();
  if (tasks_.size() >= capacity_) {
    // The finished task updated longest ago makes room; none finished: refused.
    auto victim = by_update_.end();
    for (auto it = by_update_.begin(); it != by_update_.end(); ++it) {
      auto found = tasks_.find(it->second);
      if (found != tasks_.end() && is_terminal(found->second.state)) {
        victim = it;
        break;
      }
    }
    if (victim == by_update_.end()) return std::nullopt;
    tasks_.erase(victim->second);
    by_update_.erase(victim);
  }
  t.updated = std::chrono::system_clock::now();
  t.seq = ++seq_;
  by_update_.emplace(Key{t.updated, t.seq}, t.id);
  tasks_.emplace(t.id, t);
  return t;
}

std::optional<Task> TaskStore::get(const std::string& agent, const std::string& id) {
  std::lock_guard lock(mu_);
  expire();
  auto it = tasks_.find(id);
  if (it == tasks_.end() || it->second.agent != agent) return std::nullopt;
  return it->second;
}

bool TaskStore::append(const std::string& id, const std::string& text) {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end() || is_terminal(it->second.state)) return false;
  it->second.reply += text;
  if (auto l = listeners_.find(id); l != listeners_.end())
    for (auto& listener : l->second) listener(it->second, &text);
  return true;
}

void TaskStore::tell_end(const Task& t) {
  auto l = listeners_.find(t.id);
  if (l == listeners_.end()) return;
  auto listeners = std::move(l->second);
  listeners_.erase(l);
  for (auto& listener : listeners) listener(t, nullptr);
}

std::optional<Task> TaskStore::subscribe(const std::string& agent, const std::string& id,
                                         const std::function<void(const Task&)>& snapshot,
                                         Listener listener) {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end() || it->second.agent != agent) return std::nullopt;
  if (!is_terminal(it->second.state)) {
    snapshot(it->second);
    listeners_[id].push_back(std::move(listener));
  }
  return it->second;
}

std::optional<Task> TaskStore::finish(const std::string& id, TaskState state,
                                      std::optional<std::string> reply, nlohmann::json status_message) {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return std::nullopt;
  Task& t = it->second;
  if (is_terminal(t.state)) return t;
  t.state = state;
  if (reply) t.reply = std::move(*reply);
  t.status_message = std::move(status_message);
  touch(t);
  tell_end(t);
  return t;
}

std::optional<std::pair<Task, bool>> TaskStore::cancel(const std::string& agent, const std::string& id) {
  std::lock_guard lock(mu_);
  expire();
  auto it = tasks_.find(id);
  if (it == tasks_.end() || it->second.agent != agent) return std::nullopt;
  Task& t = it->second;
  if (is_terminal(t.state)) return std::pair{t, false};
  t.state = TaskState::canceled;
  touch(t);
  tell_end(t);
  return std::pair{t, true};
}

ListPage TaskStore::list(const ListQuery& q) {
  ListPage page;
  std::optional<Key> after;  // the page starts below this key
  if (!q.page_token.empty()) {
    Key k;
    if (parse_token(q.page_token, k.first, k.second)) after = k;
  }
  std::lock_guard lock(mu_);
  expire();
  for (auto it = by_update_.rbegin(); it != by_update_.rend(); ++it) {
    const Task& t = tasks_.at(it->second);
    if (t.agent != q.agent || (!q.context_id.empty() && t.context_id != q.context_id) ||
        (q.state && t.state != *q.state) || (q.updated_after && t.updated < *q.updated_after))
      continue;
    ++page.total;
    if (after && !(it->first < *after)) continue;
    if (page.tasks.size() < q.page_size) {
      page.tasks.push_back(t);
    } else if (page.next_page_token.empty()) {
      const Task& last = page.tasks.back();
      page.next_page_token = token_of(last.updated, last.seq);
    }
  }
  return page;
}

std::size_t TaskStore::size() {
  std::lock_guard lock(mu_);
  return tasks_.size();
}

}  // namespace gateway::a2a
