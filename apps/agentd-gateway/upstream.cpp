#include "upstream.h"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>

namespace gateway {

namespace {

agentd::Error as_error(const std::exception& e) {
  if (const auto* a = dynamic_cast<const agentd::Error*>(&e)) return *a;
  return agentd::Error(agentd::ErrorCode::internal, e.what());
}

}  // namespace

Upstream::Upstream(std::string host, std::uint16_t port, agentd::ClientOptions options,
                   unsigned blocking_threads)
    : host_(std::move(host)), port_(port), options_(std::move(options)), blocking_(blocking_threads) {
  try {
    client_.emplace(agentd::Client::connect(host_, port_, options_));
    return;
  } catch (const std::exception& e) {
    first_error_ = e.what();
    last_error_ = e.what();
  }
  connector_ = std::thread([this] { keep_connecting(); });
}

Upstream::~Upstream() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (connector_.joinable()) connector_.join();
  blocking_.join();
  if (client_) client_->close();
}

void Upstream::keep_connecting() {
  auto wait = std::chrono::milliseconds(200);
  while (true) {
    {
      std::unique_lock lock(mu_);
      if (stop_cv_.wait_for(lock, wait, [this] { return stopping_; })) return;
    }
    try {
      agentd::Client c = agentd::Client::connect(host_, port_, options_);
      std::lock_guard lock(mu_);
      client_.emplace(std::move(c));
      std::cerr << "agentd-gateway: connected to the server at " << host_ << ":" << port_ << "\n";
      return;
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      last_error_ = e.what();
    }
    wait = std::min(wait * 2, std::chrono::milliseconds(5000));
  }
}

std::variant<agentd::Client*, agentd::Error> Upstream::client() {
  std::lock_guard lock(mu_);
  if (client_) return &*client_;
  return agentd::Error(agentd::ErrorCode::disconnected,
                       "not connected to the server at " + host_ + ":" + std::to_string(port_) +
                           " yet (trying again in the background): " + last_error_,
                       "", "", true);
}

std::string Upstream::address() const {
  std::lock_guard lock(mu_);
  return client_ ? client_->address() : host_ + ":" + std::to_string(port_);
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
    auto c = client();
    if (auto* e = std::get_if<agentd::Error>(&c)) {
      result.emplace(std::move(*e));
    } else {
      try {
        agentd::AgentRef ref = std::get<agentd::Client*>(c)->agent(id);
        std::lock_guard lock(mu_);
        agents_.insert_or_assign(id, ref);
        result.emplace(std::move(ref));
      } catch (const std::exception& e) {
        result.emplace(as_error(e));
      }
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
    auto c = client();
    if (auto* e = std::get_if<agentd::Error>(&c)) {
      result.emplace(std::move(*e));
    } else {
      try {
        result.emplace(std::get<agentd::Client*>(c)->list_agents());
      } catch (const std::exception& e) {
        result.emplace(as_error(e));
      }
    }
    done(std::move(*result));
  });
}

}  // namespace gateway
