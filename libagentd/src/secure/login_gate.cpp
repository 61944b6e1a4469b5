#include "login_gate.h"

#include "value_codec.h"

#include <agentd/error.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {

class GateImpl final : public wire::Gate::Server {
 public:
  GateImpl(GateContext& ctx, std::string peer, std::string address, MakeServer make_server)
      : ctx_(ctx), peer_(std::move(peer)), address_(std::move(address)), make_server_(kj::mv(make_server)) {}

  kj::Promise<void> login(LoginContext context) override {
    auto token = context.getParams().getToken();
    auto results = context.getResults();
    auto verdict = check_login(ctx_, peer_, address_, std::string_view(token.cStr(), token.size()));
    if (auto* e = std::get_if<Error>(&verdict)) {
      write_error(*e, results.initError());
      return kj::READY_NOW;
    }
    KJ_IF_MAYBE (s, server_) {
      results.setServer(*s);
    } else {
      auto made = make_server_(std::get<TokenSet::Digest>(verdict));
      results.setServer(made);
      server_ = kj::mv(made);
    }
    return kj::READY_NOW;
  }

 private:
  GateContext& ctx_;
  std::string peer_;
  std::string address_;
  MakeServer make_server_;
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

std::variant<TokenSet::Digest, Error> check_login(GateContext& ctx, const std::string& peer,
                                                  const std::string& address, std::string_view token) {
  // An address over its budget of failed logins (or any address with recent failures while
  // the server is over its own) is refused at once, its token unchecked; nothing waits.
  if (auto r = ctx.throttle.refused(address, LoginThrottle::Clock::now())) {
    const auto seconds = (r->retry_after.count() + 999) / 1000;
    spdlog::debug("login refused from {} unchecked: too many failed logins {}", peer,
                  r->overall ? "on this server" : "from this address");
    return Error(ErrorCode::unauthenticated,
                 r->overall
                     ? fmt::format("too many failed logins on this server lately (yours "
                                   "from {} among them); try again in {} s",
                                   address, seconds)
                     : fmt::format("too many failed logins from {}; try again in {} s", address, seconds));
  }
  if (auto digest = ctx.tokens.match(token)) return *digest;
  const auto now = LoginThrottle::Clock::now();
  ctx.throttle.failed(address, now);
  std::string next;
  if (auto r = ctx.throttle.refused(address, now))
    next = fmt::format("; further logins from {} are refused unchecked for {} s{}", address,
                       (r->retry_after.count() + 999) / 1000,
                       r->overall ? " (too many failures on this server)" : "");
  spdlog::warn("login refused from {}: {} token{}", peer, token.empty() ? "no" : "wrong", next);
  return Error(ErrorCode::unauthenticated,
               token.empty() ? "this server requires a token: pass one (ClientOptions::token, "
                               "$AGENTD_TOKEN, or --token-file FILE)"
                             : "wrong token: the server does not accept it (check the token given "
                               "against the server's --auth-token-file)");
}

wire::Gate::Client make_refusing_gate(std::string why) { return kj::heap<RefusingGate>(std::move(why)); }

wire::Gate::Client make_gate(GateContext& ctx, std::string peer, std::string address,
                             MakeServer make_server) {
  return kj::heap<GateImpl>(ctx, std::move(peer), std::move(address), kj::mv(make_server));
}

}  // namespace agentd::detail
