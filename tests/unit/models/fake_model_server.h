// The fake model endpoint the model client tests talk to over real HTTP: fake_model_server.py,
// started as a child process on a free loopback port. See that script for paths and scenarios.
#pragma once

#include <agentd/value.h>

#include <string>
#include <sys/types.h>

namespace agentd::test {

class FakeModelServer {
 public:
  // Starts the server and waits until it reports its port (fails the test run after 20 s).
  FakeModelServer();
  // Stops it: closes its stdin (it exits on EOF), sends SIGTERM, reaps it.
  ~FakeModelServer();
  FakeModelServer(const FakeModelServer&) = delete;
  FakeModelServer& operator=(const FakeModelServer&) = delete;

  int port() const { return port_; }
  // "http://127.0.0.1:<port>/s/<key>/<scenario>": append the API path (or let the model do it).
  std::string base(const std::string& key, const std::string& scenario) const;
  // A model config file (models.yaml) with one openai_chat config named config_name that talks
  // to this server's scenario under key (no retries).
  std::string openai_config(const std::string& config_name, const std::string& key,
                            const std::string& scenario) const;
  // What the server received under `key`: [{"path", "headers", "body", "t"}], in arrival order.
  Value requests(const std::string& key) const;
  // {"in_flight", "max_in_flight"}: requests under `key` being answered now, and the most at once.
  Value stats(const std::string& key) const;

 private:
  Value get(const std::string& path) const;  // GET path, the answer as JSON

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int port_ = 0;
};

// One server per test process, started on first use.
FakeModelServer& fake_model_server();

// A key no other test in this process uses.
std::string unique_key(const std::string& prefix);

// A loopback port nothing listens on (bound, then closed).
int closed_port();

}  // namespace agentd::test
