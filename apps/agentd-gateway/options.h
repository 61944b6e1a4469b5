// agentd-gateway's command line.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gateway {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

struct Options {
  HostPort listen{"127.0.0.1", 8080};
  HostPort server;                  // the upstream as_server, or:
  std::string cluster;              // a cluster spec (agentd::Cluster::open: file, dns:NAME:PORT, A:P,B:P)
  std::string config_file;          // what is exposed (exposure_config.h; empty: every agent by id)
  std::string token_file;           // bearer tokens clients must present (empty: none)
  std::string tls_cert;             // HTTPS towards clients: the certificate (chain), PEM
  std::string tls_key;              // and its private key (both or neither)
  std::string upstream_token_file;  // the token to log in to the server with
  std::string upstream_tls_ca;      // TLS to the server: the CA bundle that signed its certificate
  std::string upstream_tls_cert;    // and a client certificate with its key (--tls-client-ca)
  std::string upstream_tls_key;
  bool allow_unauthenticated = false;
  bool console_send = false;  // the web console may send agents messages (read-only otherwise)
  bool no_console = false;    // no /console routes and no sampler
  unsigned threads = 2;       // threads running the io_context
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 4 * 1024 * 1024;
  std::size_t max_connections = 10000;
  std::chrono::seconds request_timeout{30};  // a whole request (or a keep-alive idle wait)
  std::chrono::seconds write_timeout{30};    // one write to a client that does not read
  std::chrono::seconds reply_timeout{600};   // an agent's answer to one request
  std::size_t a2a_max_tasks = 10000;         // A2A tasks held in memory
  std::chrono::seconds a2a_task_ttl{3600};   // how long a finished A2A task is kept
};

// Parses argv. Prints --help (exit code 0) or an error naming the option (exit code 2) and
// returns the exit code then; std::nullopt means "run with these options".
std::optional<int> parse_options(int argc, char** argv, Options& out);

// "HOST:PORT" or "[V6]:PORT". Throws std::invalid_argument naming what is wrong.
HostPort parse_host_port(const std::string& text, const std::string& what);

// True only for an address no other machine can reach: "localhost", or an IP address literal in
// 127.0.0.0/8 or ::1. Any other name is not (it may resolve to anything, "127.x.example" too).
bool is_loopback(const std::string& host);

}  // namespace gateway
