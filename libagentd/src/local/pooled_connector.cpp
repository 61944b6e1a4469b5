#include "pooled_connector.h"

#include "client_core.h"
#include "endpoint.h"

#include <fmt/format.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace agentd::detail {

namespace {

// How long agent code waits for the server's loop to open a link (it opens at once unless the
// server is stopping).
constexpr auto kLoopAnswer = std::chrono::seconds(10);

// The links of one server: an attached ClientCore per peer address. Cores are made, detached
// and released on the server's loop thread; the server drops its connector (and so this) before
// its peer connections.
class PeerLinks : public std::enable_shared_from_this<PeerLinks> {
 public:
  explicit PeerLinks(Server& server) : server_(server) {}
  ~PeerLinks() {
    for (auto& core : made_) core->detach();
  }
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // Agent code, on a worker thread: the open link to host:port, made on the loop if needed.
  std::shared_ptr<ClientCore> link(const std::string& host, std::uint16_t port,
                                   const std::string& server_id) {
    std::string origin = net::Endpoint::from(host, port).text();
    {
      std::lock_guard lock(mu_);
      if (auto it = links_.find(origin); it != links_.end() && it->second->open()) return it->second;
    }
    auto made = std::make_shared<std::promise<std::shared_ptr<ClientCore>>>();
    auto answer = made->get_future();
    server_.on_loop([weak = weak_from_this(), made, origin, port, server_id]() {
      auto self = weak.lock();
      if (!self) return;
      try {
        made->set_value(self->open_link(origin, port, server_id));
      } catch (...) {
        made->set_exception(std::current_exception());
      }
    });
    if (answer.wait_for(kLoopAnswer) != std::future_status::ready)
      throw Error::retryable(ErrorCode::disconnected,
                             fmt::format("cannot reach the agents at {}: this server is stopping", origin));
    return answer.get();
  }

 private:
  // Loop thread.
  std::shared_ptr<ClientCore> open_link(const std::string& origin, std::uint16_t port,
                                        const std::string& server_id) {
    std::lock_guard lock(mu_);
    if (auto it = links_.find(origin); it != links_.end() && it->second->open()) return it->second;
    const bool here = server_id == server_.id() || origin == server_.advertise_address();
    ClientCore::Attached attached{
        .io = server_.io(),
        .server = here ? server_.bootstrap() : server_.peer(origin),
        .lost = nullptr,
        .address = here ? server_.advertise_address() : origin,
        .server_id = here ? server_.id() : server_id,
        .port = port,
    };
    if (!here) attached.lost = server_.peer_lost(origin);
    auto core = std::make_shared<ClientCore>(std::move(attached), ClientOptions{});
    links_[origin] = core;
    made_.push_back(core);
    return core;
  }

  Server& server_;  // outlives this (it owns the connector that owns this)
  std::mutex mu_;   // guards links_ and made_
  std::map<std::string, std::shared_ptr<ClientCore>> links_;  // by "host:port": the newest
  std::vector<std::shared_ptr<ClientCore>> made_;             // all of them, to detach
};

}  // namespace

ConnectorFactory pooled_agent_connector() {
  return [](Server& server) -> AgentConnector {
    auto links = std::make_shared<PeerLinks>(server);
    return [links](const std::string& host, std::uint16_t port, const std::string& server_id) {
      return std::make_shared<ClientLink>(links->link(host, port, server_id));
    };
  };
}

}  // namespace agentd::detail
