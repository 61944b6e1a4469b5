#include "exposure.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gateway {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxKeyBytes = 256;

std::uint64_t random64() {
  thread_local std::mt19937_64 gen{[] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }()};
  return gen();
}

std::string hex(std::uint64_t v, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return std::string(buf, static_cast<std::size_t>(digits));
}

Resolved from_lookup(AgentOrError r) {
  if (auto* e = std::get_if<agentd::Error>(&r)) return std::move(*e);
  return Target{std::move(std::get<agentd::AgentRef>(r)), nullptr};
}

}  // namespace

int Refusal::http_status() const {
  switch (kind) {
    case Kind::no_entry:
    case Kind::agent_missing:
      return 404;
    case Kind::too_many:
      return 429;
    case Kind::bad_key:
      return 400;
  }
  return 400;
}

struct Exposure::State : std::enable_shared_from_this<State> {
  struct Conversation {
    std::uint64_t serial = 0;
    std::string agent_id;                                // chosen before it is created
    std::optional<agentd::AgentRef> agent;               // once created
    std::vector<std::function<void(Resolved)>> waiting;  // requests waiting for the creation
    unsigned in_use = 0;                                 // leases held
    bool one_shot = false;
    Clock::time_point last_used;
  };

  // Holds a conversation's agent for one request.
  struct Lease {
    Lease(std::shared_ptr<State> s, std::size_t entry, std::string key, std::uint64_t serial)
        : s(std::move(s)), entry(entry), key(std::move(key)), serial(serial) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { s->release(entry, key, serial); }
    std::shared_ptr<State> s;
    std::size_t entry;
    std::string key;
    std::uint64_t serial;
  };

  State(Upstream& u, std::optional<ExposureConfig> c) : upstream(u), config(std::move(c)) {
    if (config) conversations.resize(config->entries.size());
  }

  Upstream& upstream;  // used only while !stopped, under mu (so never after stop())
  const std::optional<ExposureConfig> config;
  std::mutex mu;
  std::condition_variable cv;                                                     // the sweeper's sleep
  bool stopped = false;                                                           // guarded by mu
  std::vector<std::unordered_map<std::string, Conversation>> conversations;       // guarded by mu: by entry
  std::unordered_map<std::string, std::pair<std::size_t, std::string>> by_agent;  // guarded by mu
  std::uint64_t serials = 0;                                                      // guarded by mu

  std::shared_ptr<void> lease(std::size_t entry, const std::string& key, Conversation& c) {  // mu held
    ++c.in_use;
    c.last_used = Clock::now();
    return std::make_shared<Lease>(shared_from_this(), entry, key, c.serial);
  }

  // mu held, !stopped: forgets a conversation and deletes its agent.
  void drop(std::size_t entry, const std::string& key) {
    auto& m = conversations[entry];
    auto it = m.find(key);
    if (it == m.end()) return;
    const std::string id = it->second.agent_id;
    const bool created = it->second.agent.has_value();
    by_agent.erase(id);
    m.erase(it);
    if (created) delete_agent(id);
  }

  void delete_agent(const std::string& id) {  // mu held
    upstream.delete_agent(id, [id](std::optional<agentd::Error> e) {
      if (e && e->code() != agentd::ErrorCode::unknown_agent)
        std::cerr << "agentd-gateway: could not delete the conversation agent " << id << ": " << e->what()
                  << "\n";
    });
  }

  void release(std::size_t entry, const std::string& key, std::uint64_t serial) {
    std::lock_guard lock(mu);
    if (stopped) return;
    auto& m = conversations[entry];
    auto it = m.find(key);
    if (it == m.end() || it->second.serial != serial) return;  // ended already
    auto& c = it->second;
    if (c.in_use > 0) --c.in_use;
    c.last_used = Clock::now();
    if (c.one_shot && c.in_use == 0) drop(entry, key);
  }

  // Upstream::forget: the agent is gone from the server; its conversation ends (no delete).
  void gone(const std::string& agent_id) {
    std::lock_guard lock(mu);
    auto it = by_agent.find(agent_id);
    if (it == by_agent.end()) return;
    auto& m = conversations[it->second.first];
    auto c = m.find(it->second.second);
    if (c != m.end() && c->second.agent) m.erase(c);
    by_agent.erase(it);
  }

  // On a blocking thread: the creation of a conversation's agent ended.
  void created(std::size_t entry, const std::string& key, std::uint64_t serial, AgentOrError r) {
    std::vector<std::function<void(Resolved)>> waiting;
    std::vector<std::shared_ptr<void>> leases;
    std::optional<agentd::AgentRef> agent;
    std::optional<Resolved> failure;
    {
      std::lock_guard lock(mu);
      auto& m = conversations[entry];
      auto it = m.find(key);
      if (it == m.end() || it->second.serial != serial) return;  // cannot happen: kept until created
      waiting = std::move(it->second.waiting);
      it->second.waiting.clear();
      if (auto* e = std::get_if<agentd::Error>(&r)) {
        failure = *e;
        by_agent.erase(it->second.agent_id);
        m.erase(it);
      } else if (stopped) {
        // Made while the gateway stops: deleted again (this is a blocking thread, so upstream is
        // alive: its destructor waits for this thread).
        const std::string id = it->second.agent_id;
        by_agent.erase(id);
        m.erase(it);
        upstream.delete_agent(id, [](std::optional<agentd::Error>) {});
        failure = agentd::Error(agentd::ErrorCode::stopping, "agentd-gateway is stopping", "", "", true);
      } else {
        it->second.agent = std::get<agentd::AgentRef>(std::move(r));
        agent = it->second.agent;
        for (std::size_t i = 0; i < waiting.size(); ++i) leases.push_back(lease(entry, key, it->second));
      }
    }
    for (std::size_t i = 0; i < waiting.size(); ++i) {
      if (failure) {
        waiting[i](*failure);
      } else {
        waiting[i](Target{agent, std::move(leases[i])});
      }
    }
  }

  // The sweeper: deletes the agents of conversations idle past their entry's idle-timeout.
  void sweep(Clock::duration period) {
    std::unique_lock lock(mu);
    while (!stopped) {
      cv.wait_for(lock, period);
      if (stopped) return;
      const auto now = Clock::now();
      for (std::size_t e = 0; e < conversations.size(); ++e) {
        const auto idle = config->entries[e].idle_timeout;
        std::vector<std::string> expired;
        for (const auto& [key, c] : conversations[e])
          if (c.agent && c.in_use == 0 && now - c.last_used >= idle) expired.push_back(key);
        for (const auto& key : expired) drop(e, key);
      }
    }
  }
};

Exposure::Exposure(Upstream& upstream, std::optional<ExposureConfig> config,
                   std::function<std::unique_ptr<Backend>()> connect_briefly)
    : upstream_(upstream),
      connect_briefly_(std::move(connect_briefly)),
      s_(std::make_shared<State>(upstream, std::move(config))) {
  if (!s_->config) return;
  // The sweep runs a few times per shortest idle-timeout (at most every 5 s).
  std::optional<std::chrono::milliseconds> shortest;
  for (const auto& e : s_->config->entries)
    if (e.per_conversation()) shortest = std::min(shortest.value_or(e.idle_timeout), e.idle_timeout);
  if (!shortest) return;
  const auto period = std::clamp<std::chrono::milliseconds>(*shortest / 4, std::chrono::milliseconds(20),
                                                            std::chrono::milliseconds(5000));
  upstream_.on_forget([s = s_](const std::string& id) { s->gone(id); });
  sweeper_ = std::thread([s = s_.get(), period] { s->sweep(period); });
}

Exposure::~Exposure() {
  {
    std::lock_guard lock(s_->mu);
    s_->stopped = true;
  }
  s_->cv.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
}

const ExposureConfig* Exposure::config() const { return s_->config ? &*s_->config : nullptr; }

void Exposure::check(const std::string& name, std::function<void(Resolved)> done) {
  if (!s_->config)
    return upstream_.with_agent(
        name, [done = std::move(done)](AgentOrError r) { done(from_lookup(std::move(r))); });
  if (!s_->config->find(name))
    return done(Refusal{Refusal::Kind::no_entry, "no entry '" + name + "' in --config " + s_->config->path +
                                                     " (it exposes: " + s_->config->names() + ")"});
  done(Target{});
}

void Exposure::resolve(const std::string& name, const std::string& key, std::function<void(Resolved)> done) {
  if (!s_->config) return check(name, std::move(done));
  const EntryConfig* entry = s_->config->find(name);
  if (!entry) return check(name, std::move(done));
  if (!entry->per_conversation()) {
    return upstream_.with_agent(entry->agent, [entry, done = std::move(done)](AgentOrError r) {
      auto* e = std::get_if<agentd::Error>(&r);
      if (e && e->code() == agentd::ErrorCode::unknown_agent)
        return done(Refusal{Refusal::Kind::agent_missing,
                            "entry '" + entry->name + "' (--config " + entry->where + ") is the agent '" +
                                entry->agent +
                                "', which is not on the server: create it (agentctl create CLASS "
                                "--id " +
                                entry->agent + ") or correct the entry"});
      done(from_lookup(std::move(r)));
    });
  }
  if (key.size() > kMaxKeyBytes)
    return done(Refusal{Refusal::Kind::bad_key,
                        "the conversation key (A2A contextId, X-Conversation-Id or user) is " +
                            std::to_string(key.size()) + " bytes; at most " + std::to_string(kMaxKeyBytes) +
                            " are taken"});
  const std::size_t index = static_cast<std::size_t>(entry - s_->config->entries.data());
  const bool one_shot = key.empty();
  const std::string k = one_shot ? "one-shot:" + agentd::new_id() : key;
  State& s = *s_;
  std::unique_lock lock(s.mu);
  if (s.stopped) {
    lock.unlock();
    return done(agentd::Error(agentd::ErrorCode::stopping, "agentd-gateway is stopping", "", "", true));
  }
  auto& m = s.conversations[index];
  auto it = m.find(k);
  if (it != m.end()) {
    auto& c = it->second;
    if (!c.agent) {
      c.waiting.push_back(std::move(done));
      return;
    }
    Target t{c.agent, s.lease(index, k, c)};
    lock.unlock();
    return done(std::move(t));
  }
  if (m.size() >= entry->max_conversations) {
    lock.unlock();
    return done(Refusal{Refusal::Kind::too_many,
                        "entry '" + entry->name + "' has " + std::to_string(entry->max_conversations) +
                            " conversations live, its max-conversations (--config " + entry->where +
                            "): try again once one has been idle for its idle-timeout, or raise the limit"});
  }
  State::Conversation c;
  c.serial = ++s.serials;
  c.agent_id = entry->name + "-" + hex(random64(), 16);
  c.one_shot = one_shot;
  c.last_used = Clock::now();
  c.waiting.push_back(std::move(done));
  const std::uint64_t serial = c.serial;
  s.by_agent.emplace(c.agent_id, std::make_pair(index, k));
  const std::string id = c.agent_id;
  m.emplace(k, std::move(c));
  upstream_.create_agent(entry->agent_class, entry->args, id, [s = s_, index, k, serial](AgentOrError r) {
    s->created(index, k, serial, std::move(r));
  });
}

void Exposure::stop() {
  State& s = *s_;
  std::vector<std::string> ids;
  {
    std::lock_guard lock(s.mu);
    if (s.stopped) return;
    s.stopped = true;
    // Conversations still being created stay: created() deletes their agents.
    for (auto& m : s.conversations)
      for (auto it = m.begin(); it != m.end();) {
        if (!it->second.agent) {
          ++it;
          continue;
        }
        ids.push_back(it->second.agent_id);
        s.by_agent.erase(it->second.agent_id);
        it = m.erase(it);
      }
  }
  s.cv.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  if (ids.empty()) return;
  // Not through upstream: its calls wait for a server that is gone (up to --reply-timeout).
  std::size_t deleted = 0;
  std::string failure = "no connection to delete them with";
  if (connect_briefly_) {
    failure.clear();
    try {
      auto backend = connect_briefly_();
      for (const auto& id : ids) {
        try {
          backend->delete_agent(id);
          ++deleted;
        } catch (const agentd::Error& e) {
          if (e.code() == agentd::ErrorCode::unknown_agent) {
            ++deleted;  // gone already
            continue;
          }
          failure = e.what();
          if (e.code() == agentd::ErrorCode::disconnected || e.code() == agentd::ErrorCode::timeout) break;
        }
      }
      backend->close();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (deleted == ids.size())
    std::cerr << "agentd-gateway: deleted " << deleted << " conversation agents\n";
  else
    std::cerr << "agentd-gateway: left " << ids.size() - deleted << " of " << ids.size()
              << " conversation agents on the server (" << failure << ")\n";
}

}  // namespace gateway
