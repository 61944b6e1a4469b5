// The upstream as_server, through the client library (agentd::Client): the only way the gateway
// reaches agents.
//
// Agent calls (reply, reply_stream) return at once and report through Placeholder::on_ready /
// on_chunk, so no thread waits for an agent. What the client library offers only synchronously
// (looking an agent up by id, listing agents) runs on a small pool of its own ("blocking"
// threads), never on the threads serving HTTP; agents looked up once are kept, so a
// completion's lookup is a map read after the first.
//
// The server need not be up when the gateway starts: until a first connection is made (tried
// again in the background with backoff), requests fail with a retryable `disconnected` (503).
// Once connected, the client reconnects by itself after losing the server.
#pragma once

#include <agentd/client.h>

#include <boost/asio/thread_pool.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

namespace gateway {

using AgentOrError = std::variant<agentd::AgentRef, agentd::Error>;
using AgentsOrError = std::variant<std::vector<agentd::AgentInfo>, agentd::Error>;

class Upstream {
 public:
  // Connects at once; when that fails, keeps trying in the background (first_error says why the
  // first try failed; empty when connected).
  Upstream(std::string host, std::uint16_t port, agentd::ClientOptions options, unsigned blocking_threads);
  ~Upstream();
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  // The agent with this id: done runs at once on this thread when it is known, else on a
  // blocking thread after asking the server (agentd::Error unknown_agent when there is none).
  void with_agent(const std::string& id, std::function<void(AgentOrError)> done);
  // The agent went away (a call to it failed with unknown_agent): look it up again next time.
  void forget(const std::string& id);
  // Every agent on the server; done runs on a blocking thread.
  void list_agents(std::function<void(AgentsOrError)> done);

  // "host:port" as given (the server's advertised address once connected).
  std::string address() const;
  const std::string& first_error() const { return first_error_; }

 private:
  // The client once connected; otherwise the error requests get.
  std::variant<agentd::Client*, agentd::Error> client();
  void keep_connecting();

  const std::string host_;
  const std::uint16_t port_;
  const agentd::ClientOptions options_;
  std::string first_error_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                                     // guarded by mu_
  std::optional<agentd::Client> client_;                      // guarded by mu_ until set, then never changed
  std::string last_error_;                                    // guarded by mu_
  std::unordered_map<std::string, agentd::AgentRef> agents_;  // guarded by mu_
  std::thread connector_;                                     // while not connected
  boost::asio::thread_pool blocking_;  // declared after client_: joined before it closes
};

}  // namespace gateway
