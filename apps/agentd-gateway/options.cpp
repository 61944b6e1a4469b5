#include "options.h"

#include <boost/asio/ip/address.hpp>
#include <boost/program_options.hpp>

#include <iostream>
#include <stdexcept>

namespace gateway {

namespace po = boost::program_options;

HostPort parse_host_port(const std::string& text, const std::string& what) {
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      throw std::invalid_argument(what + ": '" + text + "' is not [V6ADDRESS]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw std::invalid_argument(what + ": '" + text + "' is not HOST:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) > 65535)
    throw std::invalid_argument(what + ": '" + port + "' is not a port (0-65535)");
  return HostPort{host, static_cast<std::uint16_t>(std::stoul(port))};
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

std::optional<int> parse_options(int argc, char** argv, Options& out) {
  std::string listen = "127.0.0.1:8080";
  std::string server;
  long request_timeout = out.request_timeout.count();
  long write_timeout = out.write_timeout.count();
  long reply_timeout = out.reply_timeout.count();
  long a2a_task_ttl = out.a2a_task_ttl.count();
  po::options_description desc(
      "agentd-gateway: the agents on an as_server (or a cluster of them), reachable over HTTP: an\n"
      "OpenAI-compatible API and the Agent2Agent protocol (A2A 1.0 and 0.3, JSON-RPC).\n"
      "\n"
      "  GET  /v1/models             every agent on the server, under its id (with --config: the\n"
      "                              configured entries, under their names)\n"
      "  POST /v1/chat/completions   model = an agent id (an entry); the last user message is the\n"
      "                              agent's reply() input; \"stream\": true streams the agent's chunks\n"
      "                              as chat.completion.chunk events, then data: [DONE]\n"
      "  POST /a2a/ID/               A2A JSON-RPC (SendMessage, SendStreamingMessage, GetTask, ...;\n"
      "                              A2A-Version: 1.0, or 0.3's message/send, ... without the header)\n"
      "  GET  /a2a/ID/.well-known/agent-card.json   the agent's card (/.well-known/agent-card.json:\n"
      "                              the gateway's, listing them all)\n"
      "  GET  /metrics               Prometheus metrics\n"
      "  GET  /console               the web console: servers, agents, calls and models, live (the\n"
      "                              page is public; its data, /console/api/..., wants the token)\n"
      "\n"
      "It is a client of as_server (as agentctl is). When it listens it prints\n"
      "  agentd-gateway ready: listening on HOST:PORT server=HOST:PORT pid=PID url=URL\n"
      "(URL: http://HOST:PORT, or https:// with --tls-cert).\n"
      "SIGINT/SIGTERM stop it (exit 0). Exit codes: 2 bad option, file (tokens, certificate, key)\n"
      "or --config, 3 cannot listen. A server that cannot be reached (yet, or after a restart) is\n"
      "tried again in the background; requests wait for it up to --reply-timeout, or get 503\n"
      "before the first connection.\n"
      "\n"
      "Options");
  // clang-format off
  desc.add_options()
    ("help,h", "print this help and exit")
    ("listen", po::value(&listen)->default_value(listen),
     "HOST:PORT to serve HTTP on (port 0: a free port, named in the ready line); an address beyond "
     "loopback needs --token-file or --allow-unauthenticated")
    ("server", po::value(&server), "HOST:PORT of the as_server whose agents are served")
    ("cluster", po::value(&out.cluster),
     "instead of --server, the agents of every server of a cluster: a cluster file (YAML, see the "
     "README), dns:NAME:PORT (every address NAME resolves to), or HOST:PORT,HOST:PORT,...")
    ("config", po::value(&out.config_file),
     "a YAML file naming what is exposed (then only that): entries that are a fixed agent "
     "(NAME: {agent: ID}) or a new agent of a class per conversation (NAME: {class: CLASS, args, "
     "idle-timeout, max-conversations}; the conversation is the A2A contextId, or the OpenAI "
     "X-Conversation-Id header, else the request's user; without one, a completion gets an agent "
     "of its own, deleted after its answer), each with a description and skills for its agent "
     "card; see config/gateway.yaml. Without it: every agent on the server, under its id")
    ("token-file", po::value(&out.token_file),
     "bearer tokens clients must send (Authorization: Bearer TOKEN), one per line, '#' comments; "
     "the file must not be readable by group or others (chmod 600)")
    ("tls-cert", po::value(&out.tls_cert),
     "serve HTTPS only (TLS 1.2 and 1.3), with this PEM certificate, followed by its chain; needs "
     "--tls-key. A plaintext request is answered 400 saying to use https. Read once at start: a "
     "certificate renewed on disk needs a restart")
    ("tls-key", po::value(&out.tls_key),
     "the PEM private key of --tls-cert, unencrypted; other users must not be able to read it "
     "(chmod 600, or 640 for a group such as ssl-cert)")
    ("upstream-token-file", po::value(&out.upstream_token_file),
     "the token to log in to the server with (its first token; same format; default $AGENTD_TOKEN)")
    ("upstream-tls-ca", po::value(&out.upstream_tls_ca),
     "TLS to the server (as_server --tls-cert): the CA bundle (PEM) that signed its certificate, "
     "which must name the host given in --server")
    ("upstream-tls-cert", po::value(&out.upstream_tls_cert),
     "with --upstream-tls-key: a client certificate (PEM), for servers started with --tls-client-ca")
    ("upstream-tls-key", po::value(&out.upstream_tls_key), "the key of --upstream-tls-cert (PEM)")
    ("allow-unauthenticated", po::bool_switch(&out.allow_unauthenticated),
     "allow listening beyond loopback without --token-file")
    ("threads", po::value(&out.threads)->default_value(out.threads), "threads serving HTTP")
    ("max-connections", po::value(&out.max_connections)->default_value(out.max_connections),
     "open client connections at most; one more is closed at once")
    ("max-header-bytes", po::value(&out.max_header_bytes)->default_value(out.max_header_bytes),
     "the largest request header (beyond it: 431)")
    ("max-body-bytes", po::value(&out.max_body_bytes)->default_value(out.max_body_bytes),
     "the largest request body (beyond it: 413)")
    ("request-timeout", po::value(&request_timeout)->default_value(request_timeout),
     "seconds a client has to send a whole request, and the longest a keep-alive connection may "
     "stay idle (slow clients are closed)")
    ("write-timeout", po::value(&write_timeout)->default_value(write_timeout),
     "seconds one write to a client may take before the connection is closed")
    ("reply-timeout", po::value(&reply_timeout)->default_value(reply_timeout),
     "seconds a completion waits for the agent's answer (then 504, or a timeout error event ending "
     "the stream); also the longest the server may stay unreachable for a request (the gateway "
     "reconnects to it meanwhile)")
    ("a2a-max-tasks", po::value(&out.a2a_max_tasks)->default_value(out.a2a_max_tasks),
     "A2A tasks held in memory; a new one evicts the finished task updated longest ago, and is "
     "refused when all are still working")
    ("a2a-task-ttl", po::value(&a2a_task_ttl)->default_value(a2a_task_ttl),
     "seconds a finished A2A task is kept for GetTask and ListTasks")
    ("console-send", po::bool_switch(&out.console_send),
     "let the web console (/console) send agents messages (POST /console/api/agents/ID/send); "
     "without it the console only reads. Needs the same token as every other route")
    ("no-console", po::bool_switch(&out.no_console),
     "serve no web console: no /console routes, and the servers are not sampled once a second");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    if (server.empty() == out.cluster.empty())
      throw std::invalid_argument("give one of --server HOST:PORT and --cluster SPEC");
    if (out.tls_cert.empty() != out.tls_key.empty())
      throw std::invalid_argument(
          "HTTPS needs both --tls-cert and --tls-key (PEM files); give both, or neither");
    if (out.upstream_tls_cert.empty() != out.upstream_tls_key.empty())
      throw std::invalid_argument("--upstream-tls-cert and --upstream-tls-key go together");
    if (!out.upstream_tls_cert.empty() && out.upstream_tls_ca.empty())
      throw std::invalid_argument("--upstream-tls-cert needs --upstream-tls-ca (TLS to the server)");
    out.listen = parse_host_port(listen, "--listen");
    if (!server.empty()) out.server = parse_host_port(server, "--server");
    if (out.threads == 0) throw std::invalid_argument("--threads must be at least 1");
    if (request_timeout <= 0 || write_timeout <= 0 || reply_timeout <= 0)
      throw std::invalid_argument("--request-timeout, --write-timeout and --reply-timeout must be positive");
    out.reply_timeout = std::chrono::seconds(reply_timeout);
    if (out.console_send && out.no_console)
      throw std::invalid_argument("--console-send and --no-console contradict each other: pick one");
    if (a2a_task_ttl <= 0 || out.a2a_max_tasks == 0)
      throw std::invalid_argument("--a2a-task-ttl and --a2a-max-tasks must be positive");
    out.a2a_task_ttl = std::chrono::seconds(a2a_task_ttl);
    out.request_timeout = std::chrono::seconds(request_timeout);
    out.write_timeout = std::chrono::seconds(write_timeout);
    if (!is_loopback(out.listen.host) && out.token_file.empty() && !out.allow_unauthenticated)
      throw std::invalid_argument(
          "--listen " + listen +
          " is beyond loopback: refusing to serve it without a token, since anyone who reaches the port "
          "could call every agent. Require a token with --token-file FILE (make one with `openssl rand -hex "
          "32 > FILE && chmod 600 FILE`), or, on a trusted network only, pass --allow-unauthenticated");
  } catch (const std::exception& e) {
    std::cerr << "agentd-gateway: " << e.what() << "\n(agentd-gateway --help lists the options)\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace gateway
