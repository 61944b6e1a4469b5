// What one agentd-bench run measures and with which sizes: the command line, parsed by main().
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

namespace agentd::bench {

struct Config {
  std::vector<std::string> servers;       // "host:port"; empty: start our own as_server children
  std::string token;                      // --token-file's token for --server (empty: $AGENTD_TOKEN)
  std::string tls_ca, tls_cert, tls_key;  // TLS to --server servers (empty tls_ca: plaintext),
                                          // or to tls_server when that is given
  std::string tls_server;                 // "host:port" serving TLS: W1/W2 measured there beside server 0
  std::string unix_socket;                // the first server's --unix-socket: W1 measured over it too
  std::string plugin_dir;
  std::string as_server;  // empty: $AGENTD_AS_SERVER, then next to this program, ...
  std::set<std::string> workloads;
  int repeat = 3;
  bool quick = false;
  std::size_t threads = 8;                // client threads for bulk creation (create_agent is sync)
  std::size_t payload = 64;               // bytes of content in W1/W2 messages and baselines
  std::size_t calls = 2000;               // W1 calls per repeat
  long lane_spin_us = -1;                 // the C++ clients' ClientOptions::lane_spin (-1: its default)
  std::size_t replies = 4000;             // W2 replies per repeat (fits the default result pool)
  std::size_t echo_agents = 10;           // W2 agents
  int sleep_ms = 5000;                    // W3 web agent sleep
  std::size_t web_agents = 5;             // W3 agents
  std::size_t create_n = 100000;          // W4 agents created
  std::size_t chain = 100;                // W5 chain length
  std::size_t message_bytes = 1 << 20;    // W6 message size
  std::size_t agents = 1000;              // W7 blocking agents
  int block_ms = 1000;                    // W7 block per reply
  std::size_t async_agents = 100000;      // W7 asynchronous agents (WaitAgent), all waiting at once
  int wait_ms = 1000;                     // W7 asynchronous wait (sleep_for) per reply
  std::size_t model_agents = 10000;       // W7 asynchronous agents each asking a model that delays
                                          // wait_ms (a local endpoint), all at once
  std::size_t bulk_n = 1000000;           // W9 agents, one reply each, all in flight at once
  std::size_t sim_participants = 100000;  // W8 participants in all
  std::size_t sim_servers = 4;            // W8 child servers
  std::size_t sim_groups_per_server = 0;  // W8 groups per server (0: the example's default)
  int sim_latency_ms = 1000;              // W8 participants' simulated model latency
  std::size_t soak_calls = 1000000;       // W12 replies in all
  std::size_t soak_connections = 100;     // W12 connections, each its own Client and thread
  std::size_t soak_window = 250;          // W12 calls in flight per connection
  std::size_t soak_agents = 4;            // W12 agents per connection
  bool soak_without_state = false;        // W12 on a child without --state-dir (to compare)
  std::string py_agent_dir;               // W13: the bench's Python agent classes (--agent-dir)
  std::size_t py_sleepers = 100;          // W13 blocking Python agents (time.sleep block_ms)
  std::size_t py_create_n = 100000;       // W13 Python agents created (create_agents)
  std::string gateway;           // W14: agentd-gateway (empty: $AGENTD_GATEWAY, beside this program, $PATH)
  unsigned gateway_threads = 2;  // W14 the gateway's --threads
  std::size_t gateway_connections = 64;  // W14 keep-alive connections of the load part
  std::size_t gateway_requests = 60000;  // W14 completions of the load part per repeat
  std::size_t gateway_streams = 1000;    // W14 streamed completions at once
  std::size_t console_agents = 1000000;  // W15 agents on the server the console pages through
  int console_seconds = 20;              // W15 time the server's CPU is measured over
  std::size_t tool_agents = 1000;        // W16 asynchronous agents each calling a slow MCP tool, at once
};

}  // namespace agentd::bench
