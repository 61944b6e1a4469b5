#include "pooled_connector.h"

#include <agentd/client.h>

#include "agent_ref.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace agentd::detail {

AgentConnector pooled_agent_connector() {
  // One client connection per server address, opened on first use and shared by every agent
  // of the server that holds the connector; closed when the connector goes.
  struct Pool {
    std::mutex mu;
    std::map<std::string, std::unique_ptr<Client>> clients;
  };
  return [pool = std::make_shared<Pool>()](const Value& ref) {
    auto where = parse_agent_ref(ref);
    std::string key = where.host + ":" + std::to_string(where.port);
    Client* client = nullptr;
    {
      std::lock_guard lock(pool->mu);
      auto& c = pool->clients[key];
      if (!c) c = std::make_unique<Client>(Client::connect(where.host, where.port));
      client = c.get();
    }
    return client->agent(where.id);
  };
}

}  // namespace agentd::detail
