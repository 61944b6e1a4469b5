#include "dial.h"

#include "buffered_stream.h"
#include "counting_stream.h"
#include "value_codec.h"

namespace agentd::net {

const char* stage_name(DialStage stage) {
  switch (stage) {
    case DialStage::resolve:
      return "resolve";
    case DialStage::connect:
      return "connect";
    case DialStage::tls:
      return "TLS";
    case DialStage::login:
      return "login";
    case DialStage::info:
      return "info";
  }
  return "?";
}

kj::Promise<kj::Own<Dialed>> dial(kj::AsyncIoContext& io, const Endpoint& to, DialOptions options) {
  using detail::to_kj;
  using detail::to_std;
  auto d = kj::heap<Dialed>();
  Dialed* dp = d.get();
  auto& timer = io.provider->getTimer();
  const auto stage_ms = options.stage_limit.count() * kj::MILLISECONDS;
  // A stage's promise within the stage limit, if there is one.
  auto bounded = [&timer, stage_ms, limited = options.stage_limit.count() > 0](auto p) {
    return limited ? timer.timeoutAfter(stage_ms, kj::mv(p)) : kj::mv(p);
  };
  detail::TlsConfig* tls = to.is_unix() ? nullptr : options.tls;
  auto steps =
      bounded(io.provider->getNetwork().parseAddress(to_kj(to.text())))
          .then([dp, bounded](kj::Own<kj::NetworkAddress> addr) {
            dp->stage = DialStage::connect;
            return bounded(addr->connect()).attach(kj::mv(addr));
          })
          .then([dp, bounded, tls,
                 host = to.host](kj::Own<kj::AsyncIoStream> raw) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
            if (tls == nullptr) return kj::mv(raw);
            dp->stage = DialStage::tls;
            return bounded(tls->connect(kj::mv(raw), host));
          })
          .then([dp, bounded, bytes = options.bytes,
                 token = kj::mv(options.token)](kj::Own<kj::AsyncIoStream> raw) {
            dp->stage = DialStage::login;
            // Counted beneath the buffer: once per socket read, not once per piece of a frame.
            kj::Own<kj::AsyncIoStream> counted =
                bytes != nullptr ? kj::heap<detail::CountingStream>(kj::mv(raw), *bytes) : kj::mv(raw);
            dp->stream = kj::heap<detail::BufferedStream>(kj::mv(counted));
            dp->rpc = kj::heap<detail::RpcConnection>(*dp->stream);
            // Log in at the gate; info goes pipelined on the server the login returns.
            auto login = dp->rpc->bootstrap().castAs<wire::Gate>().loginRequest();
            login.setToken(to_kj(token));
            auto logged_in = login.send();
            dp->server = logged_in.getServer();
            auto info_sent = dp->server.infoRequest().send();
            return bounded(kj::mv(logged_in))
                .then([dp, bounded, info_sent = kj::mv(info_sent)](
                          capnp::Response<wire::Gate::LoginResults> answer) mutable -> kj::Promise<void> {
                  if (answer.hasError()) {
                    dp->refused = detail::read_error(answer.getError());
                    return kj::READY_NOW;
                  }
                  dp->stage = DialStage::info;
                  return bounded(kj::mv(info_sent))
                      .then([dp](capnp::Response<wire::AgentServer::InfoResults> info) {
                        dp->server_id = to_std(info.getInfo().getServerId());
                        dp->advertised = to_std(info.getInfo().getAdvertiseAddress());
                      });
                });
          });
  kj::Promise<void> whole =
      options.total_limit.count() > 0
          ? timer.timeoutAfter(options.total_limit.count() * kj::MILLISECONDS, kj::mv(steps))
          : kj::mv(steps);
  return whole.catch_([dp](kj::Exception&& e) { dp->failed.emplace(kj::mv(e)); })
      .then([d = kj::mv(d)]() mutable {
        if (!d->ok()) {  // nothing half-made is kept: capabilities first, then the connection
          d->server = nullptr;
          d->rpc = nullptr;
          d->stream = nullptr;
        }
        return kj::mv(d);
      });
}

}  // namespace agentd::net
