// PeerPool: pooled connections from this server to other servers, used to fetch the results of
// placeholders produced elsewhere directly from their origin (never through the main process).
// Loop thread only.
#pragma once

#include "agentd.capnp.h"
#include "counting_stream.h"
#include "fetch_cache.h"
#include "result_pool.h"
#include "task_errors.h"
#include "tls.h"

#include <kj/async-io.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <deque>
#include <vector>
#include <map>
#include <memory>
#include <string>

namespace agentd::detail {

class PeerPool {
 public:
  struct Options {
    // How long an origin that cannot be reached (connection refused or timing out, the
    // connection lost, or no answer to pings) is tried again, with backoff, before the fetch
    // fails `disconnected` (--peer-connect-timeout). Counted from the first failure; a
    // connection made resets it.
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(60);
    // How long a fetch may wait for a result the origin is still computing
    // (--peer-fetch-timeout); a producer may run long.
    std::chrono::milliseconds fetch_timeout = std::chrono::hours(2);
    std::string token;         // what this server logs in to its peers with (--peer-token-file)
    TlsConfig* tls = nullptr;  // TLS to peers (borrowed, outlives the pool); null: plaintext
    // What tls trusts, for messages: "--peer-tls-ca FILE", "the system's CAs", ...
    std::string tls_trust = "the system's CAs";
    // Results fetched are kept for further consumers here: at most this many, and this many
    // bytes of them; a result over cache_entry_bytes is not kept (FetchCache says why).
    std::size_t cache_entries = 1024;
    std::size_t cache_bytes = 64 << 20;
    std::size_t cache_entry_bytes = 256 << 10;
  };

  // io is borrowed and outlives the pool; so does bytes (may be null), which counts the traffic
  // of the connections this pool opens.
  PeerPool(kj::AsyncIoContext& io, Options options, ByteCount* bytes = nullptr);
  ~PeerPool();

  // Fetches the result of call_id from the server at origin ("host:port"), which must be the
  // server server_id (the one that made the call), and hands it to done (on the loop thread).
  // Outcomes besides the result:
  // - the origin cannot be verified or refuses this server (TLS certificate not trusted or not
  //   naming the origin, its client certificate refused, the login refused): at once,
  //   `unauthenticated` (not retryable), naming the origin, the reason and the option to fix;
  // - the origin cannot be reached (refused, timing out, lost, frozen: a connection waiting on
  //   a fetch is pinged every few seconds, and one that does not answer counts as lost): tried
  //   again with backoff (100 ms doubling to 2 s) until connect_timeout after the first failure,
  //   then `disconnected` (retryable) saying how long it tried; it may be restarting;
  // - the result not computed within fetch_timeout: `timeout` (retryable);
  // - another server now at origin: `unknown_call`.
  // The first failure to reach an origin is logged at warn with its address and reason, and
  // its recovery at info; retries are not. Results fetched once are cached (Options'
  // cache_entries and cache_bytes), so several consumers here cost one transfer
  // (a large result only by the consumers that wait on its fetch: see FetchCache).
  void fetch(const std::string& origin, const std::string& server_id, const std::string& call_id,
             ResultPool::Waiter done);

  // The server at origin over the pooled connection: a promise capability until connected
  // (calls on it fail if the connection cannot be made).
  wire::AgentServer::Client server_at(const std::string& origin);
  // Settles when the pooled connection to origin is lost, or could not be made.
  kj::Promise<void> lost(const std::string& origin);

  std::uint64_t fetches() const { return fetches_; }

  // The ping period and answer deadline on a connection that fetches wait on (derived from
  // connect_timeout: a sixth and a third of it, within 100 ms..5 s and 1..10 s). One dial (TCP,
  // TLS, login) gets ping_timeout too: a frozen origin accepts TCP connections but says nothing.
  std::chrono::milliseconds ping_interval() const;
  std::chrono::milliseconds ping_timeout() const;

 private:
  struct Peer;
  struct Attempt;  // one fetch's tries: when it started, since when the origin is unreachable
  struct Health {  // per origin, for logging the first failure and the recovery only
    bool failing = false;
    std::string reason;
    std::chrono::steady_clock::time_point since;
  };

  kj::Promise<OutcomePtr> fetch_remote(const std::string& origin, const std::string& server_id,
                                       const std::string& call_id);
  // fetch_once, again after a backoff while the origin cannot be reached, until
  // connect_timeout after the first failure. Never rejects: failures become outcomes.
  kj::Promise<OutcomePtr> fetch_retrying(const std::string& origin, const std::string& server_id,
                                         const std::string& call_id, std::shared_ptr<Attempt> attempt);
  // One try over the pooled connection (rejects as disconnected when the origin cannot be
  // reached, the connection is lost or stops answering pings).
  kj::Promise<OutcomePtr> fetch_once(const std::string& origin, const std::string& server_id,
                                     const std::string& call_id, std::shared_ptr<Attempt> attempt);
  Peer& peer(const std::string& origin);
  // Pings ref's connection while fetches wait on it; an unanswered ping breaks it.
  void keep_pinging(Peer& ref);
  kj::Promise<void> ping_loop(kj::Own<Peer> p);
  void note_failure(const std::string& origin, const std::string& reason, bool permanent);
  void note_reachable(const std::string& origin);

  kj::AsyncIoContext& io_;
  Options options_;
  ByteCount* bytes_;
  std::map<std::string, kj::Own<Peer>> peers_;
  std::map<std::string, Health> health_;
  struct Pending;
  std::map<std::string, std::shared_ptr<Pending>> inflight_;  // key origin|call_id
  FetchCache cache_;                                          // key origin|call_id
  TaskErrors task_errors_{"peer connection task"};
  kj::TaskSet tasks_;
  std::uint64_t fetches_ = 0;
};

}  // namespace agentd::detail
