// The servers a run measures: given with --server, or as_server children the bench starts (and
// the fresh children some workloads start beside them).
#pragma once

#include "config.h"
#include "private_dir.h"

#include <agentd/client.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace agentd::bench {

// "host:port" -> (host, port); "unix:PATH" -> (itself, 0). Throws std::invalid_argument naming
// --server.
std::pair<std::string, std::uint16_t> split_address(const std::string& address);

// The servers the workloads run on: given with --server, or children this process started.
class Deployment {
 public:
  // Connects to cfg.servers, or starts `children` as_server children. Throws agentd::Error.
  Deployment(const Config& cfg, std::size_t children);

  bool owned() const { return owned_; }  // children of ours: free to restart and wipe
  std::size_t size() const { return clients_.size(); }
  // A connection to server i over loopback TCP (or as --server names it).
  Client& client(std::size_t i) { return clients_.at(i); }
  // A fresh child with the bench's plugins (W3 child-mode init, W4 on a clean server), given
  // these more as_server options (W11, W12: --state-dir).
  Client spawn(const std::vector<std::string>& extra_args = {}) const;
  ChildOptions child_options() const;
  bool has_class(std::size_t i, const std::string& cls) const;
  std::size_t max_pool_size(std::size_t i) const { return pool_sizes_.at(i); }
  std::string describe() const;
  // How to connect to the deployment's servers (the token they want).
  ClientOptions client_options() const;
  // A connection to --tls-server (TLS with --tls-ca/--tls-cert/--tls-key, --token-file's token).
  Client connect_tls_server() const;

 private:
  const Config& cfg_;
  // Children of ours log in with one token of ours (so fresh connections to them can too).
  std::unique_ptr<detail::PrivateDir> secrets_;
  std::string child_token_;
  std::string child_token_file_;
  bool owned_ = false;
  // The children's own clients (over Unix sockets): closing one stops its child, so they go
  // after clients_, the loopback TCP connections the workloads use.
  std::vector<Client> children_;
  std::vector<Client> clients_;
  std::vector<std::vector<std::string>> classes_;
  std::vector<std::size_t> pool_sizes_;
};

}  // namespace agentd::bench
