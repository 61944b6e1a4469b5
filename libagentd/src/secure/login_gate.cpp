#include "login_gate.h"

#include "value_codec.h"

#include <agentd/error.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {

// The address part of "address:port" (what the throttle counts failures by).
std::string address_of(const std::string& peer) {
  if (!peer.empty() && peer[0] == '[') return peer.substr(0, peer.find(']') + 1);
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

class GateImpl final : public wire::Gate::Server {
 public:
  GateImpl(GateContext& ctx, std::string peer, kj::Function<wire::AgentServer::Client()> make_server)
      : ctx_(ctx), peer_(std::move(peer)), address_(address_of(peer_)),
        make_server_(kj::mv(make_server)) {}

  kj::Promise<void> login(LoginContext context) override {
    auto wait = ctx_.throttle.delay(address_, LoginThrottle::Clock::now());
    if (wait.count() == 0) {
      check(context);
      return kj::READY_NOW;
    }
    // Held, then checked: a burst of guesses from one address all wait.
    return ctx_.timer.afterDelay(wait.count() * kj::MILLISECONDS).then([this, context]() mutable {
      check(context);
    });
  }

 private:
  void check(LoginContext& context) {
    auto token = context.getParams().getToken();
    auto results = context.getResults();
    if (ctx_.tokens.accepts(std::string_view(token.cStr(), token.size()))) {
      ctx_.throttle.succeeded(address_);
      KJ_IF_MAYBE(s, server_) {
        results.setServer(*s);
      } else {
        auto made = make_server_();
        results.setServer(made);
        server_ = kj::mv(made);
      }
      return;
    }
    auto failures = ctx_.throttle.failed(address_, LoginThrottle::Clock::now());
    auto next = ctx_.throttle.delay(address_, LoginThrottle::Clock::now());
    spdlog::warn("login refused from {}: {} token ({} recent failure(s) from this address{})",
                 peer_, token.size() == 0 ? "no" : "wrong", failures,
                 next.count() > 0 ? fmt::format("; its logins now wait {} ms", next.count()) : "");
    write_error(Error(ErrorCode::unauthenticated,
                      token.size() == 0
                          ? "this server requires a token: pass one (ClientOptions::token, "
                            "$AGENTD_TOKEN, or --token-file FILE)"
                          : "wrong token: the server does not accept it (check the token given "
                            "against the server's --auth-token-file)"),
                results.initError());
  }

  GateContext& ctx_;
  std::string peer_;
  std::string address_;
  kj::Function<wire::AgentServer::Client()> make_server_;
  kj::Maybe<wire::AgentServer::Client> server_;
};

class RefusingGate final : public wire::Gate::Server {
 public:
  explicit RefusingGate(std::string why) : why_(std::move(why)) {}
  kj::Promise<void> login(LoginContext context) override {
    write_error(Error(ErrorCode::unauthenticated, why_), context.getResults().initError());
    return kj::READY_NOW;
  }

 private:
  std::string why_;
};

}  // namespace

wire::Gate::Client make_refusing_gate(std::string why) {
  return kj::heap<RefusingGate>(std::move(why));
}

wire::Gate::Client make_gate(GateContext& ctx, std::string peer,
                             kj::Function<wire::AgentServer::Client()> make_server) {
  return kj::heap<GateImpl>(ctx, std::move(peer), kj::mv(make_server));
}

std::string peer_name(kj::AsyncIoStream& stream) {
  sockaddr_storage ss{};
  uint len = sizeof ss;
  try {
    stream.getpeername(reinterpret_cast<sockaddr*>(&ss), &len);
  } catch (const kj::Exception&) {
    return "unknown";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return fmt::format("{}:{}", text, ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    return fmt::format("[{}]:{}", text, ntohs(a->sin6_port));
  }
  if (ss.ss_family == AF_UNIX) return "unix";
  return "unknown";
}

}  // namespace agentd::detail
