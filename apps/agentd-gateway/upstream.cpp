#include "upstream.h"

#include <boost/asio/post.hpp>

namespace gateway {

namespace {

agentd::Error as_error(const std::exception& e) {
  if (const auto* a = dynamic_cast<const agentd::Error*>(&e)) return *a;
  return agentd::Error(agentd::ErrorCode::internal, e.what());
}

}  // namespace

Upstream::Upstream(agentd::Client client, unsigned blocking_threads)
    : client_(std::move(client)), blocking_(blocking_threads) {}

Upstream::~Upstream() {
  blocking_.join();
  client_.close();
}

void Upstream::with_agent(const std::string& id, std::function<void(AgentOrError)> done) {
  std::optional<agentd::AgentRef> known;
  {
    std::lock_guard lock(mu_);
    auto it = agents_.find(id);
    if (it != agents_.end()) known = it->second;
  }
  if (known) return done(std::move(*known));
  boost::asio::post(blocking_, [this, id, done = std::move(done)] {
    std::optional<AgentOrError> result;
    try {
      agentd::AgentRef ref = client_.agent(id);
      std::lock_guard lock(mu_);
      agents_.insert_or_assign(id, ref);
      result.emplace(std::move(ref));
    } catch (const std::exception& e) {
      result.emplace(as_error(e));
    }
    done(std::move(*result));
  });
}

void Upstream::forget(const std::string& id) {
  std::lock_guard lock(mu_);
  agents_.erase(id);
}

void Upstream::list_agents(std::function<void(AgentsOrError)> done) {
  boost::asio::post(blocking_, [this, done = std::move(done)] {
    std::optional<AgentsOrError> result;
    try {
      result.emplace(client_.list_agents());
    } catch (const std::exception& e) {
      result.emplace(as_error(e));
    }
    done(std::move(*result));
  });
}

}  // namespace gateway
