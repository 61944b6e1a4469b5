// Who is in a cluster: server specs ("host:port", "dns:NAME:PORT"), cluster files, and the DNS
// resolution that turns a name into one member per address.
#pragma once

#include <agentd/cluster.h>

#include "endpoint.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace agentd::cluster {

// One server to connect to, and the spec that named it.
struct Address {
  net::Endpoint endpoint;
  std::string source;
  std::string text() const { return endpoint.text(); }  // "host:port", "[v6]:port"
};

// What a cluster file says (paths made absolute against the file's directory).
struct ClusterFile {
  std::vector<std::string> servers;  // specs, as Cluster::connect takes them
  std::string token;                 // read from token_file
  std::string tls_ca, tls_cert, tls_key;
  std::optional<Placement> placement;
};

// Throws Error(config_error) naming the file and the entry.
ClusterFile read_cluster_file(const std::string& path);

// Expands specs into addresses: "dns:NAME:PORT" into every address NAME resolves to (sorted,
// duplicates dropped, in spec order otherwise). Throws Error(bad_args) for a spec that does not
// parse or a name that does not resolve.
std::vector<Address> resolve(const std::vector<std::string>& specs);

// "round_robin" / "least_loaded"; nullopt otherwise.
std::optional<Placement> placement_from_name(const std::string& name);

// Splits "a:1,b:2" into specs when every piece parses as host:port or dns:NAME:PORT.
std::optional<std::vector<std::string>> split_spec_list(const std::string& text);

}  // namespace agentd::cluster
