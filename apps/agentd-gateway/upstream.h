// The upstream as_server, through the client library (agentd::Client): the only way the gateway
// reaches agents.
//
// Agent calls (reply, reply_stream) return at once and report through Placeholder::on_ready /
// on_chunk, so no thread waits for an agent. What the client library offers only synchronously
// (looking an agent up by id, listing agents) runs on a small pool of its own ("blocking"
// threads), never on the threads serving HTTP; agents looked up once are kept, so a
// completion's lookup is a map read after the first.
//
// Upstream is one server (agentd::Client) or a cluster (agentd::Cluster: agents are looked up on
// whichever member holds them, the listing is every member's agents).
//
// The server need not be up when the gateway starts: until a first connection is made (tried
// again in the background with backoff), requests fail with a retryable `disconnected` (503).
// Once connected, a Client reconnects by itself after losing the server; a Cluster's members
// that go down are connected again by refresh(), called every few seconds.
#pragma once

#include <agentd/client.h>
#include <agentd/cluster.h>

#include <boost/asio/thread_pool.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
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
using InfoOrError = std::variant<agentd::ServerInfo, agentd::Error>;

// What Upstream reaches agents through: one server or a cluster. Blocking calls, made on
// Upstream's blocking threads.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual agentd::AgentRef agent(const std::string& id) = 0;
  virtual std::vector<agentd::AgentInfo> list_agents() = 0;
  // A new agent (a cluster places it by its policy); its name is its id.
  virtual agentd::AgentRef create_agent(const std::string& class_name, const agentd::Value& args,
                                        const std::string& id) = 0;
  virtual void delete_agent(const std::string& id) = 0;
  virtual std::string address() = 0;
  // The servers behind it, for the console: one, or each member of a cluster (up or down), in a
  // fixed order (indexes are valid until the next refresh()).
  virtual std::size_t server_count() = 0;
  virtual std::string server_address(std::size_t i) = 0;
  // Server i's client; throws agentd::Error (disconnected, naming why) when it is down.
  // Shared: a cluster member dropped by refresh() meanwhile stays usable until released.
  virtual std::shared_ptr<agentd::Client> server(std::size_t i) = 0;
  // Server i's info, or the error that says why it is down (never throws).
  virtual InfoOrError server_info(std::size_t i) = 0;
  virtual void refresh() {}  // every few seconds, from the connecting thread
  virtual void close() = 0;
};

class Upstream {
 public:
  // connect: makes the backend (throws agentd::Error when it cannot, now). Connects at once;
  // when that fails, keeps trying in the background (first_error says why the first try
  // failed; empty when connected). address: what to call the upstream until connected. Throws
  // the agentd::Error of a first try that cannot succeed later (bad_args, config_error).
  Upstream(std::function<std::unique_ptr<Backend>()> connect, std::string address, unsigned blocking_threads);
  static std::unique_ptr<Backend> server(const std::string& host, std::uint16_t port,
                                         const agentd::ClientOptions& options);
  static std::unique_ptr<Backend> cluster(const std::string& spec, const agentd::ClientOptions& options);
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
  // Creates an agent of class_name with args under id; done runs on a blocking thread.
  void create_agent(const std::string& class_name, agentd::Value args, const std::string& id,
                    std::function<void(AgentOrError)> done);
  // Deletes the agent with this id; done (nullopt: deleted) runs on a blocking thread.
  void delete_agent(const std::string& id, std::function<void(std::optional<agentd::Error>)> done);
  // fn(backend) on a blocking thread, for what the client library offers only synchronously
  // (the console's reads: infos, pages of agents, traces, memory). Until connected, fn gets the
  // error instead (backend null). fn must not throw.
  void run_blocking(std::function<void(Backend* backend, const agentd::Error* not_connected)> fn);
  // fn(id) runs whenever forget(id) does (on forget's thread): whoever hands out the agent learns
  // that it is gone. Set before serving; fn must be quick and must not call forget.
  void on_forget(std::function<void(const std::string& id)> fn);

  // "host:port" as given (the server's advertised address once connected).
  std::string address() const;
  const std::string& first_error() const { return first_error_; }

 private:
  // On a blocking thread: get(backend) is the agent, cached under id; done gets it, or the error
  // (the backend's when not connected).
  void agent_blocking(const std::string& id, std::function<agentd::AgentRef(Backend&)> get,
                      std::function<void(AgentOrError)> done);
  // The backend once connected; otherwise the error requests get.
  std::variant<Backend*, agentd::Error> backend();
  void keep_connecting();

  const std::function<std::unique_ptr<Backend>()> connect_;
  const std::string configured_address_;
  std::string first_error_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                                     // guarded by mu_
  std::unique_ptr<Backend> backend_;                          // guarded by mu_ until set, then never changed
  std::string last_error_;                                    // guarded by mu_
  std::unordered_map<std::string, agentd::AgentRef> agents_;  // guarded by mu_
  std::function<void(const std::string&)> on_forget_;         // guarded by mu_
  std::thread connector_;                                     // connecting, then refreshing (a cluster)
  boost::asio::thread_pool blocking_;  // declared after backend_: joined before it closes
};

}  // namespace gateway
