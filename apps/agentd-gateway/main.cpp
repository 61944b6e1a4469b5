// agentd-gateway: the agents on an as_server, reachable over HTTP (OpenAI-compatible and A2A). The wiring
// diagram: options, the upstream client (agentd::Client, the client library only), the routes, the listener,
// and the threads that run the io_context.
#include "a2a/a2a_api.h"
#include "a2a/task_store.h"
#include "console/console_api.h"
#include "console/sampler.h"
#include "exposure.h"
#include "exposure_config.h"
#include "http/listener.h"
#include "http/metrics.h"
#include "http/tls.h"
#include "openai/chat_mapping.h"
#include "openai/openai_api.h"
#include "notify.h"
#include "options.h"
#include "tokens.h"
#include "upstream.h"

#include <agentd/client.h>
#include <agentd/version.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <variant>
#include <vector>

namespace asio = boost::asio;
using gateway::http::Status;

int main(int argc, char** argv) {
  gateway::Options opts;
  if (auto code = gateway::parse_options(argc, argv, opts)) return *code;

  // What is exposed: without --config every agent by its id; a config that cannot be used stops
  // the gateway here, before it connects or listens.
  std::optional<gateway::ExposureConfig> exposure_config;
  if (!opts.config_file.empty()) {
    auto loaded = gateway::load_exposure_config(opts.config_file);
    if (auto* e = std::get_if<gateway::ConfigError>(&loaded)) {
      std::cerr << "agentd-gateway: --config " << e->message << "\n";
      return 2;
    }
    exposure_config = std::move(std::get<gateway::ExposureConfig>(loaded));
  }

  gateway::TokenCheck tokens;
  gateway::http::ServerTls tls;  // HTTPS towards clients (no context: plain HTTP)
  agentd::ClientOptions client_opts;
  // The gateway outlives restarts of its server: it keeps reconnecting (a year is "forever"), and
  // requests made meanwhile wait, each for at most --reply-timeout (lookups and listings too).
  client_opts.reconnect_deadline = std::chrono::hours(24 * 365);
  client_opts.timeout = opts.reply_timeout;
  // Its replies are awaited with on_ready on the I/O threads, never with a blocking get(): no
  // lanes (each reply would be held back only to be sent on the connection).
  client_opts.lanes = agentd::LaneUse::off;
  client_opts.tls_ca = opts.upstream_tls_ca;
  client_opts.tls_cert = opts.upstream_tls_cert;
  client_opts.tls_key = opts.upstream_tls_key;
  try {
    if (!opts.token_file.empty()) tokens = gateway::TokenCheck(gateway::read_token_file(opts.token_file));
    if (!opts.upstream_token_file.empty())
      client_opts.token = gateway::read_token_file(opts.upstream_token_file).front();
    if (!opts.tls_cert.empty()) tls = gateway::http::load_server_tls(opts.tls_cert, opts.tls_key);
  } catch (const std::exception& e) {
    std::cerr << "agentd-gateway: " << e.what() << "\n";
    return 2;
  }
  if (!tls.warning.empty()) std::cerr << "agentd-gateway: warning: " << tls.warning << "\n";

  asio::io_context ioc(static_cast<int>(opts.threads));
  // A server that cannot be reached yet is tried again in the background (requests get 503
  // meanwhile), so the gateway may start before its server.
  std::unique_ptr<gateway::Upstream> upstream;
  const std::string upstream_name =
      opts.cluster.empty() ? opts.server.host + ":" + std::to_string(opts.server.port) : opts.cluster;
  try {
    auto connect = [&opts, client_opts]() {
      return opts.cluster.empty() ? gateway::Upstream::server(opts.server.host, opts.server.port, client_opts)
                                  : gateway::Upstream::cluster(opts.cluster, client_opts);
    };
    // Two blocking threads for lookups and listings, two more for the console's reads.
    upstream = std::make_unique<gateway::Upstream>(connect, upstream_name, opts.no_console ? 2 : 4);
  } catch (const std::exception& e) {
    std::cerr << "agentd-gateway: " << (opts.cluster.empty() ? "--server " : "--cluster ") << upstream_name
              << ": " << e.what() << "\n";
    return 2;
  }
  if (!upstream->first_error().empty())
    std::cerr << "agentd-gateway: cannot reach " << upstream_name << " yet (" << upstream->first_error()
              << "); trying again in the background\n";
  // At a clean stop the conversation agents are deleted over a connection that gives up within
  // seconds, instead of waiting for a server that is gone as the upstream's calls do.
  auto connect_briefly = [&opts, brief = client_opts]() mutable {
    brief.timeout = std::chrono::seconds(5);
    brief.connect_timeout = std::chrono::seconds(5);
    brief.reconnect_deadline = std::chrono::milliseconds(0);
    return opts.cluster.empty() ? gateway::Upstream::server(opts.server.host, opts.server.port, brief)
                                : gateway::Upstream::cluster(opts.cluster, brief);
  };
  gateway::Exposure exposure(*upstream, std::move(exposure_config), connect_briefly);
  gateway::openai::OpenAiApi openai(*upstream, exposure, opts.reply_timeout);
  gateway::a2a::TaskStore tasks(opts.a2a_max_tasks, opts.a2a_task_ttl);
  gateway::a2a::A2aApi a2a(*upstream, exposure, opts.reply_timeout, tokens.enabled(), tasks);

  // The web console: its own routes (the page is public, its API takes the token) and one
  // sampler reading every server once a second for all viewers.
  std::optional<gateway::console::Sampler> sampler;
  std::optional<gateway::console::ConsoleApi> console;
  auto route = [&](std::shared_ptr<gateway::http::Exchange> ex) {
    const auto& req = ex->request();
    if (console && console->handle(ex)) return;
    if (tokens.enabled() && !tokens.accepts(req[gateway::http::bhttp::field::authorization])) {
      auto e = gateway::openai::invalid_request(Status::unauthorized,
                                                "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                                                "invalid_api_key");
      return ex->respond_json(e.status, e.body);
    }
    if (req.target() == "/metrics" && req.method() == gateway::http::bhttp::verb::get)
      return ex->respond(Status::ok, "text/plain; version=0.0.4", gateway::http::metrics().text());
    if (req.target().starts_with("/v1/")) return openai.handle(ex);
    if (a2a.handle(ex)) return;
    auto e = gateway::openai::invalid_request(Status::not_found,
                                              "no such endpoint: " + std::string(req.target()), "not_found");
    ex->respond_json(e.status, e.body);
  };

  std::shared_ptr<gateway::http::Listener> listener;
  try {
    asio::ip::tcp::resolver resolver(ioc);
    auto at = resolver.resolve(opts.listen.host, std::to_string(opts.listen.port)).begin()->endpoint();
    gateway::http::Limits limits{opts.max_header_bytes, opts.max_body_bytes, opts.request_timeout,
                                 opts.write_timeout};
    listener =
        std::make_shared<gateway::http::Listener>(ioc, at, limits, opts.max_connections, route, tls.context);
  } catch (const std::exception& e) {
    std::cerr << "agentd-gateway: cannot listen on " << opts.listen.host << ":" << opts.listen.port << ": "
              << e.what() << "\n";
    return 3;
  }
  // Made before serving (route uses them), once the listener has its address.
  const auto bound_at = listener->local_endpoint();
  const std::string listening = (bound_at.address().is_v6() ? "[" + bound_at.address().to_string() + "]"
                                                            : bound_at.address().to_string()) +
                                ":" + std::to_string(bound_at.port());
  if (!opts.no_console) {
    nlohmann::json about = {{"version", agentd::version()},     {"listen", listening},
                            {"upstream", upstream_name},        {"uptime_seconds", 0},
                            {"auth", tokens.enabled()},         {"tls", tls.context != nullptr},
                            {"send_enabled", opts.console_send}};
    sampler.emplace(ioc, *upstream, std::move(about));
    console.emplace(
        *upstream, *sampler, tokens,
        gateway::console::ConsoleSettings{opts.console_send, opts.reply_timeout, opts.listen.host});
  }

  listener->start();
  if (sampler) sampler->start();

  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) {
    gateway::sd_notify("STOPPING=1\n");
    listener->stop();
    ioc.stop();
  });

  const auto bound = listener->local_endpoint();
  const std::string host =
      bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
  std::printf("agentd-gateway ready: listening on %s:%u server=%s pid=%d url=%s://%s:%u\n",
              bound.address().to_string().c_str(), static_cast<unsigned>(bound.port()),
              upstream->address().c_str(), static_cast<int>(::getpid()), listener->tls() ? "https" : "http",
              host.c_str(), static_cast<unsigned>(bound.port()));
  std::fflush(stdout);
  gateway::sd_notify("READY=1\nSTATUS=serving HTTP on " + bound.address().to_string() + ":" +
                     std::to_string(bound.port()) + " for " + upstream->address() +
                     "\nMAINPID=" + std::to_string(::getpid()) + "\n");

  std::vector<std::thread> threads;
  for (unsigned i = 1; i < opts.threads; ++i) threads.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& t : threads) t.join();
  gateway::http::set_shutting_down();
  if (sampler) sampler->stop();
  // The conversation agents are deleted (best effort, within seconds).
  exposure.stop();
  // The client first: its loop thread posts to the connections' strands, which live in ioc.
  upstream.reset();
  return 0;
}
