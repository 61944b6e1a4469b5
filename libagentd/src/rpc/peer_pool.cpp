#include "peer_pool.h"

#include "counting_stream.h"
#include "dial.h"
#include "endpoint.h"
#include "kj_errors.h"
#include "outcome_codec.h"
#include "task_errors.h"
#include "rpc_connection.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <capnp/rpc-twoparty.h>
#include <kj/common.h>

#include <algorithm>
#include <optional>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {
constexpr auto kFirstBackoff = std::chrono::milliseconds(100);
constexpr auto kMaxBackoff = std::chrono::milliseconds(2000);
// A dial cut at its fetch's deadline (the reason the tries before it gave is kept).
constexpr const char* kCutAtDeadline = "no answer before --peer-connect-timeout ran out";

using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string seconds_text(std::chrono::milliseconds d) {
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

OutcomePtr outcome(Error e) { return std::make_shared<const Outcome>(std::move(e)); }

Error refused_by(const Error& login, const std::string& origin) {
  if (login.message().find("TLS only") != std::string::npos)
    return Error(ErrorCode::unauthenticated,
                 fmt::format("the server at {} serves TLS only and this server connects to it "
                             "in plaintext: give this server --tls-cert and --tls-key too "
                             "(servers that hand each other placeholders all serve TLS, or "
                             "none)",
                             origin));
  return Error(ErrorCode::unauthenticated,
               fmt::format("the server at {} refused this server's login ({}); give this server "
                           "a token that one accepts with --peer-token-file (default: the first "
                           "of --auth-token-file)",
                           origin, login.message()));
}

}  // namespace

// One pooled connection to an origin, from the dial to its loss.
struct PeerPool::Peer : public kj::Refcounted {
  std::string origin;
  kj::ForkedPromise<void> ready = nullptr;  // connected and logged in, or refused set
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<RpcConnection> client;
  wire::AgentServer::Client server = nullptr;
  std::string server_id;  // what the server at this address says it is (set once ready)
  // Set (and ready resolved) when the origin cannot be used as configured: the login refused,
  // its TLS certificate not trusted or not naming it, this server's certificate refused.
  std::optional<Error> refused;
  // Rejects (DISCONNECTED) when the connection stops answering pings; never resolves.
  kj::Own<kj::PromiseFulfiller<void>> kill;
  kj::ForkedPromise<void> dead = nullptr;
  int waiting = 0;  // fetches waiting for an answer on this connection (pinged while > 0)
  bool pinging = false;
  bool broken = false;
};

struct PeerPool::Pending {
  std::vector<ResultPool::Waiter> waiters;
};

struct PeerPool::Attempt {
  Clock::time_point started = Clock::now();
  std::optional<Clock::time_point> unreachable_since;  // the first failure since a connection
  std::chrono::milliseconds delay{0};
  int tries = 0;
  std::string last_error;
};

PeerPool::PeerPool(kj::AsyncIoContext& io, Options options, ByteCount* bytes)
    : io_(io),
      options_(std::move(options)),
      bytes_(bytes),
      cache_(options_.cache_entries, options_.cache_bytes, options_.cache_entry_bytes),
      tasks_(task_errors_) {}

PeerPool::~PeerPool() = default;

std::chrono::milliseconds PeerPool::ping_interval() const {
  return std::clamp(options_.connect_timeout / 6, std::chrono::milliseconds(100),
                    std::chrono::milliseconds(5000));
}

std::chrono::milliseconds PeerPool::ping_timeout() const {
  return std::clamp(options_.connect_timeout / 3, std::chrono::milliseconds(1000),
                    std::chrono::milliseconds(10000));
}

void PeerPool::note_failure(const std::string& origin, const std::string& reason, bool permanent) {
  Health& h = health_[origin];
  if (h.failing && (!permanent || h.reason == reason)) return;  // logged already
  if (!h.failing) h.since = Clock::now();
  h.failing = true;
  h.reason = reason;
  if (permanent)
    spdlog::error("peer {}: {} (consumers of its placeholders fail at once)", origin, reason);
  else
    spdlog::warn(
        "peer {}: cannot reach it: {} (trying again with backoff for up to {}, "
        "--peer-connect-timeout)",
        origin, reason, seconds_text(options_.connect_timeout));
}

void PeerPool::note_reachable(const std::string& origin) {
  auto it = health_.find(origin);
  if (it == health_.end() || !it->second.failing) return;
  spdlog::info("peer {}: reachable again after {} ms", origin, ms_since(it->second.since));
  health_.erase(it);
}

PeerPool::Peer& PeerPool::peer(const std::string& origin) {
  auto it = peers_.find(origin);
  if (it != peers_.end() && !it->second->broken) return *it->second;
  auto p = kj::refcounted<Peer>();
  Peer& ref = *p;
  ref.origin = origin;
  auto killed = kj::newPromiseAndFulfiller<void>();
  ref.kill = kj::mv(killed.fulfiller);
  ref.dead = killed.promise.fork();
  // The certificate must name the host as placeholders name it (the origin's advertised
  // address).
  auto to = net::Endpoint::try_parse(origin);
  std::string host = to ? to->host : origin;
  // One dial gets a third of --peer-connect-timeout (at most 10 s): a frozen origin accepts
  // the TCP connection (the kernel does) but never answers.
  const auto limit = ping_timeout();
  kj::Promise<kj::Own<net::Dialed>> dialed = nullptr;
  if (to) {
    dialed = net::dial(io_, *to,
                       {.tls = options_.tls, .bytes = bytes_, .token = options_.token, .total_limit = limit});
  } else {
    auto d = kj::heap<net::Dialed>();
    d->failed.emplace(KJ_EXCEPTION(FAILED, "not an endpoint (HOST:PORT)", origin));
    dialed = kj::mv(d);
  }
  ref.ready =
      dialed
          .then([this, &ref, host, limit](kj::Own<net::Dialed> d) {
            if (d->ok()) {
              ref.stream = kj::mv(d->stream);
              ref.client = kj::mv(d->rpc);
              ref.server = kj::mv(d->server);
              ref.server_id = kj::mv(d->server_id);
              return;
            }
            if (d->refused) {
              ref.refused = refused_by(*d->refused, ref.origin);
              return;
            }
            const kj::Exception& e = *d->failed;
            const std::string why = e.getDescription().cStr();
            const bool tls = options_.tls != nullptr;
            if (d->stage == net::DialStage::tls && e.getType() == kj::Exception::Type::FAILED) {
              // The handshake ran and failed: a configuration problem, not a transient.
              std::string fix;
              if (why.find("ostname") != std::string::npos)
                fix = fmt::format(
                    "its TLS certificate does not name {} (the host of its "
                    "address in the placeholder, its --advertise-address): "
                    "{}; give it a certificate whose subjectAltName lists "
                    "DNS:{}",
                    host, why, host);
              else if (why.find("certificate") != std::string::npos)
                fix = fmt::format(
                    "its TLS certificate is not trusted: {}; give this "
                    "server the CA that signed it with --peer-tls-ca FILE "
                    "(now trusting {})",
                    why, options_.tls_trust);
              else
                fix = fmt::format(
                    "the TLS handshake failed: {} (a server without "
                    "--tls-cert does not serve TLS: servers that hand each "
                    "other placeholders all serve TLS, or none)",
                    why);
              ref.refused =
                  Error(ErrorCode::unauthenticated, fmt::format("the server at {} cannot be used as a "
                                                                "peer: {}",
                                                                ref.origin, fix));
              return;
            }
            if (tls && (d->stage == net::DialStage::login || d->stage == net::DialStage::info) &&
                why.find("alert") != std::string::npos) {
              ref.refused = Error(ErrorCode::unauthenticated,
                                  fmt::format("the server at {} refused this server's TLS client "
                                              "certificate (--tls-cert): {}; its --tls-client-ca must "
                                              "include the CA that signed this server's --tls-cert",
                                              ref.origin, why));
              return;
            }
            ref.broken = true;
            // Refused, unreachable, no answer within the limit: the peer could not be
            // reached (it may be restarting): a disconnect, not an overload.
            kj::throwFatalException(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                                  e.getType() == kj::Exception::Type::OVERLOADED
                                                      ? kj::str("no answer within ", limit.count(), " ms")
                                                      : kj::str(why.c_str())));
          })
          .eagerlyEvaluate(nullptr)
          .fork();
  peers_[origin] = kj::mv(p);
  return ref;
}

void PeerPool::keep_pinging(Peer& ref) {
  if (ref.pinging) return;
  ref.pinging = true;
  tasks_.add(ping_loop(kj::addRef(ref)));
}

kj::Promise<void> PeerPool::ping_loop(kj::Own<Peer> p) {
  Peer& ref = *p;
  return io_.provider->getTimer()
      .afterDelay(ping_interval().count() * kj::MILLISECONDS)
      .then([this, &ref]() -> kj::Promise<void> {
        if (ref.waiting == 0 || ref.broken) {
          ref.pinging = false;
          return kj::READY_NOW;
        }
        const auto limit = ping_timeout();
        return io_.provider->getTimer()
            .timeoutAfter(limit.count() * kj::MILLISECONDS, ref.server.pingRequest().send().ignoreResult())
            .then([this, &ref]() { return ping_loop(kj::addRef(ref)); },
                  [&ref, limit](kj::Exception&& e) -> kj::Promise<void> {
                    ref.pinging = false;
                    if (ref.broken) return kj::READY_NOW;
                    ref.broken = true;  // the next try dials again
                    std::string why =
                        e.getType() == kj::Exception::Type::OVERLOADED
                            ? fmt::format(
                                  "connected, but it did not answer a ping within {} ms "
                                  "(frozen, or its event loop blocked)",
                                  limit.count())
                            : fmt::format("the connection was lost: {}", e.getDescription().cStr());
                    ref.kill->reject(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                                   kj::str(why.c_str())));
                    return kj::READY_NOW;
                  });
      })
      .attach(kj::mv(p));
}

kj::Promise<OutcomePtr> PeerPool::fetch_remote(const std::string& origin, const std::string& server_id,
                                               const std::string& call_id) {
  ++fetches_;
  auto attempt = std::make_shared<Attempt>();
  return io_.provider->getTimer()
      .timeoutAfter(options_.fetch_timeout.count() * kj::MILLISECONDS,
                    fetch_retrying(origin, server_id, call_id, attempt))
      .catch_([this, origin, call_id, attempt](kj::Exception&& e) -> OutcomePtr {
        if (e.getType() != kj::Exception::Type::OVERLOADED)  // not the timeout: a fault
          return outcome(Error::retryable(
              ErrorCode::disconnected,
              error_from_kj(e, fmt::format("fetching the result of call {} from {}", call_id, origin))
                  .message()));
        if (attempt->unreachable_since)
          return outcome(Error::retryable(
              ErrorCode::disconnected,
              fmt::format("fetching the result of call {}: could not reach the server at {} "
                          "within --peer-fetch-timeout ({}; unreachable for the last {} ms): {}",
                          call_id, origin, seconds_text(options_.fetch_timeout),
                          ms_since(*attempt->unreachable_since), attempt->last_error)));
        return outcome(Error::retryable(
            ErrorCode::timeout,
            fmt::format("the result of call {} was not ready within --peer-fetch-timeout ({}): "
                        "the server at {} was reachable and still computing it",
                        call_id, seconds_text(options_.fetch_timeout), origin)));
      });
}

kj::Promise<OutcomePtr> PeerPool::fetch_retrying(const std::string& origin, const std::string& server_id,
                                                 const std::string& call_id,
                                                 std::shared_ptr<Attempt> attempt) {
  ++attempt->tries;
  return fetch_once(origin, server_id, call_id, attempt)
      .catch_([this, origin, server_id, call_id, attempt](kj::Exception&& e) -> kj::Promise<OutcomePtr> {
        if (e.getType() != kj::Exception::Type::DISCONNECTED)
          return outcome(
              error_from_kj(e, fmt::format("fetching the result of call {} from {}", call_id, origin)));
        // The origin cannot be reached now: it may be restarting (and, with --state-dir, come
        // back with the result). Try again on a new connection with backoff until
        // --peer-connect-timeout after the first failure.
        const auto now = Clock::now();
        if (!attempt->unreachable_since) attempt->unreachable_since = now;
        if (attempt->last_error.empty() || e.getDescription() != kCutAtDeadline)
          attempt->last_error = e.getDescription().cStr();
        note_failure(origin, attempt->last_error, false);
        const auto deadline = *attempt->unreachable_since + options_.connect_timeout;
        if (now >= deadline) {
          spdlog::debug("peer {}: giving up on call {} after {} tries", origin, call_id, attempt->tries);
          return outcome(Error::retryable(
              ErrorCode::disconnected,
              fmt::format("fetching the result of call {}: could not reach the server at {} for "
                          "{} ms ({} tries, --peer-connect-timeout {}): {}",
                          call_id, origin, ms_since(*attempt->unreachable_since), attempt->tries,
                          seconds_text(options_.connect_timeout), attempt->last_error)));
        }
        attempt->delay =
            attempt->delay.count() == 0 ? kFirstBackoff : std::min(attempt->delay * 2, kMaxBackoff);
        // The last try comes at the deadline rather than a whole backoff before it.
        const auto wait =
            std::min(attempt->delay, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
        return io_.provider->getTimer()
            .afterDelay(wait.count() * kj::MILLISECONDS)
            .then([this, origin, server_id, call_id, attempt]() {
              return fetch_retrying(origin, server_id, call_id, attempt);
            });
      });
}

kj::Promise<OutcomePtr> PeerPool::fetch_once(const std::string& origin, const std::string& server_id,
                                             const std::string& call_id, std::shared_ptr<Attempt> attempt) {
  kj::Own<Peer> p = kj::addRef(peer(origin));
  Peer& ref = *p;
  kj::Promise<void> ready = ref.ready.addBranch();
  if (attempt->unreachable_since) {
    // A dial of an origin already unreachable ends at this fetch's deadline at the latest.
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   *attempt->unreachable_since + options_.connect_timeout - Clock::now()));
    ready =
        ready.exclusiveJoin(io_.provider->getTimer().afterDelay(left.count() * kj::MILLISECONDS).then([]() {
          kj::throwFatalException(
              kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str(kCutAtDeadline)));
        }));
  }
  auto fetched = ready.then([this, &ref, origin, server_id, call_id, attempt]() -> kj::Promise<OutcomePtr> {
    if (ref.refused) {
      ref.broken = true;  // the next fetch tries again (the peer may have been reconfigured)
      note_failure(origin, ref.refused->message(), true);
      return outcome(Error(ref.refused->code(), fmt::format("fetching the result of call {}: {}", call_id,
                                                            ref.refused->message())));
    }
    note_reachable(origin);
    attempt->unreachable_since.reset();
    attempt->delay = std::chrono::milliseconds(0);
    if (!server_id.empty() && ref.server_id != server_id) {
      // The server that made the call is gone from that address (restarted or replaced): the
      // one there now has never heard of the call, and waiting for it would be in vain.
      return outcome(
          Error(ErrorCode::unknown_call,
                fmt::format("the result of call {} is gone: server {} made it, but the server at {} is "
                            "now {} (restarted or replaced)",
                            call_id, server_id, origin, ref.server_id)));
    }
    auto req = ref.server.fetchRequest();
    req.setCallId(to_kj(call_id));
    ++ref.waiting;
    keep_pinging(ref);
    return req.send()
        .then([](capnp::Response<wire::AgentServer::FetchResults> r) {
          try {
            // The usage comes along: the result is the same wherever it is read.
            return std::make_shared<const Outcome>(read_outcome(r.getOutcome()));
          } catch (const Error& e) {  // what the origin sent cannot be read: this input fails alone
            return std::make_shared<const Outcome>(e);
          } catch (const kj::Exception& e) {
            return std::make_shared<const Outcome>(unreadable(e, "the result fetched from a peer"));
          }
        })
        .exclusiveJoin(ref.dead.addBranch().then([]() -> OutcomePtr { KJ_UNREACHABLE; }))
        .attach(kj::defer([&ref]() { --ref.waiting; }));
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
      .then([this, &ref, origin]() -> wire::AgentServer::Client {
        if (ref.refused) {
          ref.broken = true;
          note_failure(origin, ref.refused->message(), true);
          kj::throwFatalException(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                                                kj::str(ref.refused->message().c_str())));
        }
        note_reachable(origin);
        return ref.server;
      })
      .attach(kj::mv(p));
}

kj::Promise<void> PeerPool::lost(const std::string& origin) {
  kj::Own<Peer> p = kj::addRef(peer(origin));
  Peer& ref = *p;
  return ref.ready.addBranch()
      .then([&ref]() -> kj::Promise<void> {
        if (ref.refused || !ref.client) return kj::READY_NOW;
        return ref.client->onDisconnect().exclusiveJoin(ref.dead.addBranch().catch_([](kj::Exception&&) {}));
      })
      .attach(kj::mv(p));
}

void PeerPool::fetch(const std::string& origin, const std::string& server_id, const std::string& call_id,
                     ResultPool::Waiter done) {
  std::string key = origin + "|" + call_id;
  if (const OutcomePtr* kept = cache_.find(key)) {
    done(*kept);
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
    if (const Msg* m = std::get_if<Msg>(out.get())) cache_.insert(key, out, approx_wire_size(*m));
    if (node)
      for (auto& w : node.mapped()->waiters) w(out);
  }));
}

}  // namespace agentd::detail
