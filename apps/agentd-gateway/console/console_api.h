// The web console under /console (CONTRACT.md section 2): the page and its assets (public,
// compiled into the binary: assets.h), and the JSON API under /console/api/ (the same bearer
// token as /v1 and /a2a) that the page reads: overview, agents, one agent, calls, trace.json,
// models, history, events (server-sent ticks from the Sampler) and, with --console-send only,
// sending an agent a message.
//
// No handler blocks an io thread: the client library's synchronous reads (pages of agents,
// traces, memory) run on Upstream's blocking threads, and what the sampler read last second
// (overview, models) is answered from memory. Every console answer carries the console's
// security headers (a strict Content-Security-Policy, nosniff, no referrer).
#pragma once

#include "console/sampler.h"
#include "http/connection.h"
#include "tokens.h"
#include "upstream.h"

#include <chrono>
#include <string>
#include <memory>

namespace gateway::console {

struct ConsoleSettings {
  bool send_enabled = false;                // --console-send
  std::chrono::seconds reply_timeout{600};  // a sent message's reply
  std::string listen_host;                  // --listen's host: a Host header the API accepts
};

class ConsoleApi {
 public:
  // All borrowed; they outlive this object.
  ConsoleApi(Upstream& upstream, Sampler& sampler, const TokenCheck& tokens, ConsoleSettings settings)
      : upstream_(upstream), sampler_(sampler), tokens_(tokens), settings_(settings) {}
  // Answers a request for /console or a path under /console/ and returns true; false for any
  // other path (left to the other routes).
  bool handle(const std::shared_ptr<http::Exchange>& ex);

 private:
  std::string cross_site_refusal(const http::Request& req) const;
  void asset(const std::shared_ptr<http::Exchange>& ex, std::string_view name);
  void api(const std::shared_ptr<http::Exchange>& ex, std::string_view path, std::string_view query);
  void agents(const std::shared_ptr<http::Exchange>& ex, std::string_view query);
  void agent(const std::shared_ptr<http::Exchange>& ex, std::string id, std::string_view query);
  void send(const std::shared_ptr<http::Exchange>& ex, std::string id);
  void calls(const std::shared_ptr<http::Exchange>& ex, std::string_view query, bool chrome);
  void events(const std::shared_ptr<http::Exchange>& ex);

  Upstream& upstream_;
  Sampler& sampler_;
  const TokenCheck& tokens_;
  const ConsoleSettings settings_;
};

}  // namespace gateway::console
