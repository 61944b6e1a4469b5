#include "deployment.h"

#include "tokens.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace agentd::bench {

// TODO(cleanup): use net::Endpoint
std::pair<std::string, std::uint16_t> split_address(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return {address, 0};
  auto colon = address.rfind(':');
  if (colon == std::string::npos)
    throw std::invalid_argument(fmt::format("--server {}: expected host:port", address));
  int port = std::stoi(address.substr(colon + 1));
  if (port <= 0 || port > 65535) throw std::invalid_argument(fmt::format("--server {}: bad port", address));
  return {address.substr(0, colon), static_cast<std::uint16_t>(port)};
}

Deployment::Deployment(const Config& cfg, std::size_t children) : cfg_(cfg) {
  if (cfg.servers.empty()) {
    owned_ = true;
    secrets_ = std::make_unique<detail::PrivateDir>();
    child_token_ = detail::random_token();
    child_token_file_ = secrets_->write_private("token", child_token_);
    // The workloads reach the children over loopback TCP, as a program reaches a server by host
    // and port and as servers reach each other: a child's own client talks to it over a Unix
    // socket (Client::spawn_child), which moves bytes faster than TCP and would set agentd
    // beside baselines that use TCP (W1's raw TCP and bare echo, W2's echo, W6's second hop
    // between the servers) on a faster link than theirs. W1's --unix-socket rows measure that link.
    for (std::size_t i = 0; i < children; ++i) {
      children_.push_back(spawn());
      auto [host, port] = split_address(children_.back().address());
      clients_.push_back(Client::connect(host, port, client_options()));
    }
  } else {
    for (const auto& s : cfg.servers) {
      auto [host, port] = split_address(s);
      clients_.push_back(Client::connect(host, port, client_options()));
    }
  }
  for (auto& c : clients_) {
    ServerInfo info = c.info();
    classes_.push_back(info.classes);
    pool_sizes_.push_back(info.max_pool_size);
  }
}

ChildOptions Deployment::child_options() const {
  ChildOptions o;
  o.plugin_dirs = {cfg_.plugin_dir};
  o.server_path = cfg_.as_server;
  // Lanes for W1's lane rows (four: W1 opens one, W13's Python client none yet).
  o.extra_args = {"--log-level", "warn", "--auth-token-file", child_token_file_};
  o.client = client_options();
  return o;
}

ClientOptions Deployment::client_options() const {
  ClientOptions o;
  if (cfg_.lane_spin_us >= 0) o.lane_spin = std::chrono::microseconds(cfg_.lane_spin_us);
  o.token = owned_ ? child_token_ : cfg_.token;
  if (!owned_ && cfg_.tls_server.empty()) {
    o.tls_ca = cfg_.tls_ca;
    o.tls_cert = cfg_.tls_cert;
    o.tls_key = cfg_.tls_key;
  }
  return o;
}

Client Deployment::connect_tls_server() const {
  ClientOptions o;
  o.token = cfg_.token;
  o.tls_ca = cfg_.tls_ca;
  o.tls_cert = cfg_.tls_cert;
  o.tls_key = cfg_.tls_key;
  auto [host, port] = split_address(cfg_.tls_server);
  return Client::connect(host, port, o);
}

Client Deployment::spawn(const std::vector<std::string>& extra_args) const {
  ChildOptions o = child_options();
  o.extra_args.insert(o.extra_args.end(), extra_args.begin(), extra_args.end());
  return Client::spawn_child(std::move(o));
}

bool Deployment::has_class(std::size_t i, const std::string& cls) const {
  const auto& v = classes_.at(i);
  return std::find(v.begin(), v.end(), cls) != v.end();
}

std::string Deployment::describe() const {
  std::string out = owned_ ? "as_server children started by the bench:" : "servers:";
  for (const auto& c : clients_) out += " " + c.address();
  return out;
}

}  // namespace agentd::bench
