// The upstream as_server, through the client library (agentd::Client): the only way the gateway
// reaches agents.
//
// Agent calls (reply, reply_stream) return at once and report through Placeholder::on_ready /
// on_chunk, so no thread waits for an agent. What the client library offers only synchronously
// (looking an agent up by id, listing agents) runs on a small pool of its own ("blocking"
// threads), never on the threads serving HTTP; agents looked up once are kept, so a
// completion's lookup is a map read after the first.
#pragma once

#include <agentd/client.h>

#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace gateway {

using AgentOrError = std::variant<agentd::AgentRef, agentd::Error>;
using AgentsOrError = std::variant<std::vector<agentd::AgentInfo>, agentd::Error>;

class Upstream {
 public:
  Upstream(agentd::Client client, unsigned blocking_threads);
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

  const std::string& address() const { return client_.address(); }

 private:
  agentd::Client client_;
  boost::asio::thread_pool blocking_;  // declared after client_: joined before it closes
  std::mutex mu_;
  std::unordered_map<std::string, agentd::AgentRef> agents_;
};

}  // namespace gateway
