// agentd::Cluster: one client over several as_servers. Agents are placed on the servers by a
// policy (or on a named server); the AgentRefs and Placeholders it returns are the ordinary ones,
// so refs from different servers mix freely in one program and placeholders cross servers as they
// do between any two servers (the consumer's server fetches the content from the origin).
//
// Membership comes from a list of addresses, a YAML cluster file, or a DNS name that resolves to
// several addresses (what a Kubernetes headless Service or Consul gives), so an orchestrator can
// own the servers; or the cluster starts its own child servers (Cluster::spawn_children).
//
// Thread-safety: a Cluster may be used from any thread; copies share the same servers.
#pragma once

#include <agentd/client.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace agentd {

enum class Placement {
  round_robin,   // the next server up, in member order
  least_loaded,  // the server up with the fewest agents (ServerInfo::agent_count, asked each time)
};

struct ClusterOptions {
  Placement placement = Placement::round_robin;
  // Token, TLS and timeouts for every server (a cluster file's settings fill what is empty here).
  ClientOptions client{};
};

// One server of a cluster, as listed or resolved.
struct ClusterMember {
  std::string address;  // "host:port" ("[v6]:port" for IPv6 addresses)
  std::string source;   // what named it: "10.0.0.5:12001", "dns:name:12001", "child"
  bool up = false;      // connected, and not seen disconnected since
  std::string error;    // why it is down (empty when up)
};

class Cluster {
 public:
  // Servers named by addresses "host:port", or "dns:NAME:PORT" for every address NAME resolves
  // to (IPv4 and IPv6, duplicates dropped). Connects to all of them in parallel; a server that
  // cannot be reached is kept as a member that is down (members(), refresh()). Throws
  // Error(bad_args) for an address that does not parse or a name that does not resolve, and
  // Error(disconnected) when no server at all can be reached.
  static Cluster connect(const std::vector<std::string>& servers, ClusterOptions options = ClusterOptions());

  // A YAML cluster file:
  //   servers:                         # required, at least one
  //     - 10.0.0.5:12001               # an address
  //     - {host: a.example, port: 12001}
  //     - dns: as-server.agentd.svc.cluster.local:12001   # every address the name resolves to
  //   token_file: /run/secrets/agentd/tokens   # optional: first line is the token
  //   tls_ca: ca.pem                   # optional, with tls_cert / tls_key
  //   placement: least_loaded          # optional: round_robin (default) | least_loaded
  // Relative paths are taken from the file's directory. Settings given in options win over the
  // file's. Throws Error(config_error) naming the file and the entry for a bad file.
  static Cluster from_file(const std::string& path, ClusterOptions options = ClusterOptions());

  // What command lines take: "dns:NAME:PORT", a list "host:port,host:port", or else the path of a
  // cluster file.
  static Cluster open(const std::string& spec, ClusterOptions options = ClusterOptions());

  // Starts n child servers in parallel (e.g. one per core), each as Client::spawn_child(child)
  // would (sharing one token, so they fetch each other's placeholders), and owns them: as with
  // Client::spawn_child, they stop once this Cluster and every ref and placeholder made through
  // it are gone (server(i).stop() stops one sooner).
  static Cluster spawn_children(std::size_t n, ChildOptions child = ChildOptions(),
                                ClusterOptions options = ClusterOptions());

  // Creates an agent on the server the placement policy picks. A server found disconnected is
  // marked down and the next one is tried; Error(disconnected) when none is up.
  AgentRef create_agent(const std::string& class_name, const std::string& name = std::string(),
                        const Value& args = Value::object(), const std::string& id = std::string());
  // The same on one server: server is a member's address or its index as text ("0", "1", ...).
  AgentRef create_agent_on(const std::string& server, const std::string& class_name,
                           const std::string& name = std::string(), const Value& args = Value::object(),
                           const std::string& id = std::string());
  // count agents of one class, spread over the servers up (round_robin: equal shares;
  // least_loaded: filling the emptiest first), created on all servers in parallel, each share in a
  // few messages (Client::create_agents). Names are name_prefix + index over the whole cluster.
  // Returned in index order. A server found down before its share is made has its share placed
  // on the others; any other failure deletes what was made and throws the first error.
  std::vector<AgentRef> create_agents(const std::string& class_name, std::size_t count,
                                      const Value& args = Value::object(),
                                      const std::string& name_prefix = std::string());

  // An agent by id, on whichever server holds it; Error(unknown_agent) when none does.
  AgentRef agent(const std::string& id);
  // Deletes every agent on every server up; returns how many.
  std::size_t delete_all_agents();

  std::size_t size() const;  // members, up or down
  std::vector<ClusterMember> members() const;
  // Resolves DNS names again (new addresses join, vanished ones leave) and reconnects members
  // that are down. Returns the members up.
  std::size_t refresh();
  // The client of member i; Error(disconnected) naming why when it is down.
  Client& server(std::size_t i);
  // server(i), shared: the Client stays valid after refresh() drops the member (a member that
  // went down), for a caller that uses it on another thread while refresh() may run.
  std::shared_ptr<Client> server_shared(std::size_t i);
  // Member i's ServerInfo, nullopt when it is down (or goes down when asked).
  std::optional<ServerInfo> info(std::size_t i);

  Cluster(const Cluster&);
  Cluster& operator=(const Cluster&);
  Cluster(Cluster&&) noexcept;
  Cluster& operator=(Cluster&&) noexcept;
  ~Cluster();

  struct State;

 private:
  explicit Cluster(std::shared_ptr<State> s) : s_(std::move(s)) {}
  std::shared_ptr<State> s_;
};

}  // namespace agentd
