#include "peer_pool.h"

#include "child_process.h"  // split_host_port
#include "counting_stream.h"
#include "task_errors.h"
#include "rpc_connection.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <optional>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {
constexpr std::size_t kCacheSize = 1024;

Error refused_by(const Error& login, const std::string& origin, const std::string& call_id) {
  return Error(ErrorCode::unauthenticated,
               fmt::format("fetching the result of call {}: the server at {} refused this "
                           "server's login ({}); give this server a token that one accepts with "
                           "--peer-token-file (default: the first of --auth-token-file)",
                           call_id, origin, login.message()));
}

}  // namespace

struct PeerPool::Peer : public kj::Refcounted {
  kj::ForkedPromise<void> ready = nullptr;
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<RpcConnection> client;
  wire::AgentServer::Client server = nullptr;
  std::string server_id;  // what the server at this address says it is (set once ready)
  std::optional<Error> login_error;  // the peer refused our --peer-token-file (ready resolves)
  bool broken = false;
};

struct PeerPool::Pending {
  std::vector<ResultPool::Waiter> waiters;
};

PeerPool::PeerPool(kj::AsyncIoContext& io, Options options, ByteCount* bytes)
    : io_(io), options_(options), bytes_(bytes), tasks_(task_errors_) {}

PeerPool::~PeerPool() = default;

PeerPool::Peer& PeerPool::peer(const std::string& origin) {
  auto it = peers_.find(origin);
  if (it != peers_.end() && !it->second->broken) return *it->second;
  auto p = kj::refcounted<Peer>();
  Peer& ref = *p;
  auto connect =
      io_.provider->getNetwork()
          .parseAddress(to_kj(origin))
          .then([](kj::Own<kj::NetworkAddress> addr) {
            return addr->connect().attach(kj::mv(addr));
          })
          .then([this, origin](kj::Own<kj::AsyncIoStream> stream)
                    -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
            if (options_.tls == nullptr) return kj::mv(stream);
            // The certificate must name the host as placeholders name it (the origin's
            // advertised address).
            std::string host = origin;
            std::uint16_t port = 0;
            split_host_port(origin, host, port);
            if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
            return options_.tls->connect(kj::mv(stream), host);
          })
          .then([this, &ref](kj::Own<kj::AsyncIoStream> stream) {
            ref.stream = bytes_ ? kj::heap<CountingStream>(kj::mv(stream), *bytes_)
                                   : kj::mv(stream);
            ref.client = kj::heap<RpcConnection>(*ref.stream);
            auto login = ref.client->bootstrap().castAs<wire::Gate>().loginRequest();
            login.setToken(to_kj(options_.token));
            auto logged_in = login.send();
            ref.server = logged_in.getServer();
            auto info = ref.server.infoRequest().send();
            return logged_in.then(
                [&ref, info = kj::mv(info)](capnp::Response<wire::Gate::LoginResults> r) mutable
                -> kj::Promise<void> {
                  if (r.hasError()) {
                    ref.login_error = read_error(r.getError());
                    ref.server = nullptr;
                    return kj::READY_NOW;
                  }
                  return info.then([&ref](capnp::Response<wire::AgentServer::InfoResults> i) {
                    ref.server_id = to_std(i.getInfo().getServerId());
                  });
                });
          });
  auto timed = io_.provider->getTimer().timeoutAfter(
      options_.connect_timeout.count() * kj::MILLISECONDS, kj::mv(connect));
  const auto limit_ms = options_.connect_timeout.count();
  ref.ready = timed.eagerlyEvaluate([&ref, origin, limit_ms](kj::Exception&& e) {
                     ref.broken = true;
                     // Whatever went wrong (refused, unreachable, no answer within the
                     // limit), the peer could not be reached: a disconnect, not an overload.
                     kj::throwFatalException(kj::Exception(
                         kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                         kj::str("could not connect to the server at ", origin.c_str(),
                                 " within ", limit_ms, " ms (--peer-connect-timeout): ",
                                 e.getDescription())));
                   }).fork();
  peers_[origin] = kj::mv(p);
  return ref;
}

kj::Promise<OutcomePtr> PeerPool::fetch_remote(const std::string& origin,
                                               const std::string& server_id,
                                               const std::string& call_id) {
  ++fetches_;
  const auto started = std::chrono::steady_clock::now();
  return io_.provider->getTimer()
      // The last try starts at the fetch timeout at the latest, and gets the connect timeout.
      .timeoutAfter((options_.fetch_timeout + options_.connect_timeout).count() * kj::MILLISECONDS,
                    fetch_retrying(origin, server_id, call_id,
                                   started + options_.fetch_timeout,
                                   std::chrono::milliseconds(0)))
      .catch_([origin, call_id, started](kj::Exception&& e) {
        Error err = error_from_exception(
            e, fmt::format("fetching the result of call {} from {} (tried for {} ms, "
                           "--peer-fetch-timeout)",
                           call_id, origin,
                           std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - started)
                               .count()));
        return std::make_shared<const Outcome>(Error::retryable(
            err.code() == ErrorCode::internal ? ErrorCode::disconnected : err.code(),
            err.message()));
      });
}

kj::Promise<OutcomePtr> PeerPool::fetch_retrying(const std::string& origin,
                                                 const std::string& server_id,
                                                 const std::string& call_id,
                                                 std::chrono::steady_clock::time_point deadline,
                                                 std::chrono::milliseconds delay) {
  return fetch_once(origin, server_id, call_id)
      .catch_([this, origin, server_id, call_id, deadline,
               delay](kj::Exception&& e) -> kj::Promise<OutcomePtr> {
        // The connection to the origin went, or cannot be made: the origin may be restarting
        // (and, with --state-dir, come back with the result). Try again on a new connection
        // with backoff until --peer-fetch-timeout; other failures are final.
        if (e.getType() != kj::Exception::Type::DISCONNECTED) kj::throwFatalException(kj::mv(e));
        const auto next = delay.count() == 0
                              ? std::chrono::milliseconds(100)
                              : std::min(delay * 2, std::chrono::milliseconds(2000));
        // The last try comes at the deadline rather than a whole backoff before it.
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) kj::throwFatalException(kj::mv(e));
        const auto wait = std::min(
            next, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
        return io_.provider->getTimer()
            .afterDelay(wait.count() * kj::MILLISECONDS)
            .then([this, origin, server_id, call_id, deadline, next]() {
              return fetch_retrying(origin, server_id, call_id, deadline, next);
            });
      });
}

kj::Promise<OutcomePtr> PeerPool::fetch_once(const std::string& origin,
                                             const std::string& server_id,
                                             const std::string& call_id) {
  kj::Own<Peer> p = kj::addRef(peer(origin));
  Peer& ref = *p;
  auto fetched = ref.ready.addBranch().then([&ref, origin, server_id, call_id]() -> kj::Promise<OutcomePtr> {
    if (ref.login_error) {
      ref.broken = true;  // the next fetch tries again (the peer may have been reconfigured)
      return std::make_shared<const Outcome>(refused_by(*ref.login_error, origin, call_id));
    }
    if (!server_id.empty() && ref.server_id != server_id) {
      // The server that made the call is gone from that address (restarted or replaced): the
      // one there now has never heard of the call, and waiting for it would be in vain.
      return std::make_shared<const Outcome>(Error(
          ErrorCode::unknown_call,
          fmt::format("the result of call {} is gone: server {} made it, but the server at {} is "
                      "now {} (restarted or replaced)",
                      call_id, server_id, origin, ref.server_id)));
    }
    auto req = ref.server.fetchRequest();
    req.setCallId(to_kj(call_id));
    return req.send().then([](capnp::Response<wire::AgentServer::FetchResults> r) {
      auto o = r.getOutcome();
      if (!o.isMsg()) return std::make_shared<const Outcome>(read_error(o.getError()));
      try {
        return std::make_shared<const Outcome>(read_msg(o.getMsg()));
      } catch (const Error& e) {  // what the origin sent cannot be read: this input fails alone
        return std::make_shared<const Outcome>(e);
      } catch (const kj::Exception& e) {
        return std::make_shared<const Outcome>(unreadable(e, "the result fetched from a peer"));
      }
    });
  });
  return fetched
      .catch_([&ref](kj::Exception&& e) -> OutcomePtr {
        // A failed connection is replaced on the next fetch; the result may be there by then.
        if (e.getType() == kj::Exception::Type::DISCONNECTED) ref.broken = true;
        kj::throwFatalException(kj::mv(e));
      })
      .attach(kj::mv(p));
}

wire::AgentServer::Client PeerPool::server_at(const std::string& origin) {
  kj::Own<Peer> p = kj::addRef(peer(origin));
  Peer& ref = *p;
  return ref.ready.addBranch()
      .then([&ref, origin]() -> wire::AgentServer::Client {
        if (ref.login_error) {
          ref.broken = true;
          kj::throwFatalException(kj::Exception(
              kj::Exception::Type::FAILED, __FILE__, __LINE__,
              kj::str("the server at ", origin.c_str(),
                      " refused this server's login (--peer-token-file): ",
                      ref.login_error->message().c_str())));
        }
        return ref.server;
      })
      .attach(kj::mv(p));
}

kj::Promise<void> PeerPool::lost(const std::string& origin) {
  kj::Own<Peer> p = kj::addRef(peer(origin));
  Peer& ref = *p;
  return ref.ready.addBranch()
      .then([&ref]() { return ref.client->onDisconnect(); })
      .attach(kj::mv(p));
}

void PeerPool::fetch(const std::string& origin, const std::string& server_id,
                     const std::string& call_id, ResultPool::Waiter done) {
  std::string key = origin + "|" + call_id;
  if (auto it = cache_.find(key); it != cache_.end()) {
    done(it->second);
    return;
  }
  if (origin.empty()) {
    done(std::make_shared<const Outcome>(
        Error(ErrorCode::bad_request,
              fmt::format("placeholder for call {} names no origin server address", call_id))));
    return;
  }
  auto [it, inserted] = inflight_.try_emplace(key);
  if (!inserted) {
    it->second->waiters.push_back(kj::mv(done));
    return;
  }
  it->second = std::make_shared<Pending>();
  it->second->waiters.push_back(kj::mv(done));
  tasks_.add(fetch_remote(origin, server_id, call_id).then([this, key](OutcomePtr out) {
    auto node = inflight_.extract(key);
    bool ok = std::holds_alternative<Msg>(*out);
    if (ok) {
      cache_[key] = out;
      cache_order_.push_back(key);
      while (cache_order_.size() > kCacheSize) {
        cache_.erase(cache_order_.front());
        cache_order_.pop_front();
      }
    }
    if (node) for (auto& w : node.mapped()->waiters) w(out);
  }));
}

}  // namespace agentd::detail
