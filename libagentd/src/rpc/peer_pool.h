// PeerPool: pooled connections from this server to other servers, used to fetch the results of
// placeholders produced elsewhere directly from their origin (never through the main process).
// Loop thread only.
#pragma once

#include "agentd.capnp.h"
#include "counting_stream.h"
#include "result_pool.h"
#include "task_errors.h"
#include "tls.h"

#include <kj/async-io.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>
#include <map>
#include <memory>
#include <string>

namespace agentd::detail {

class PeerPool {
 public:
  struct Options {
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(10);
    std::chrono::milliseconds fetch_timeout = std::chrono::hours(2);  // a producer may run long
    std::string token;  // what this server logs in to its peers with (--peer-token-file)
    TlsConfig* tls = nullptr;  // TLS to peers (borrowed, outlives the pool); null: plaintext
  };

  // io is borrowed and outlives the pool; so does bytes (may be null), which counts the traffic
  // of the connections this pool opens.
  PeerPool(kj::AsyncIoContext& io, Options options, ByteCount* bytes = nullptr);
  ~PeerPool();

  // Fetches the result of call_id from the server at origin ("host:port"), which must be the
  // server server_id (the one that made the call), and hands it to done (on the loop thread).
  // Failures (unreachable origin, lost connection, timeout, another server now at origin) reach
  // done as an Error outcome with retryable set where retrying could help. An origin that cannot
  // be reached (or whose connection goes) is tried again, with backoff, until fetch_timeout: it
  // may be restarting. Results fetched once
  // are cached, so several consumers here cost one transfer.
  void fetch(const std::string& origin, const std::string& server_id, const std::string& call_id,
             ResultPool::Waiter done);

  // The server at origin over the pooled connection: a promise capability until connected
  // (calls on it fail if the connection cannot be made).
  wire::AgentServer::Client server_at(const std::string& origin);
  // Settles when the pooled connection to origin is lost, or could not be made.
  kj::Promise<void> lost(const std::string& origin);

  std::uint64_t fetches() const { return fetches_; }

 private:
  struct Peer;
  kj::Promise<OutcomePtr> fetch_remote(const std::string& origin, const std::string& server_id,
                                       const std::string& call_id);
  // fetch_once, again after a backoff (growing from delay) while the connection to origin is
  // lost or cannot be made, until deadline.
  kj::Promise<OutcomePtr> fetch_retrying(const std::string& origin, const std::string& server_id,
                                         const std::string& call_id,
                                         std::chrono::steady_clock::time_point deadline,
                                         std::chrono::milliseconds delay);
  // One try over the pooled connection (rejects as disconnected when it is lost).
  kj::Promise<OutcomePtr> fetch_once(const std::string& origin, const std::string& server_id,
                                     const std::string& call_id);
  Peer& peer(const std::string& origin);

  kj::AsyncIoContext& io_;
  Options options_;
  ByteCount* bytes_;
  std::map<std::string, kj::Own<Peer>> peers_;
  struct Pending;
  std::map<std::string, std::shared_ptr<Pending>> inflight_;  // key origin|call_id
  std::map<std::string, OutcomePtr> cache_;                   // bounded, FIFO
  std::deque<std::string> cache_order_;
  TaskErrors task_errors_{"peer connection task"};
  kj::TaskSet tasks_;
  std::uint64_t fetches_ = 0;
};

}  // namespace agentd::detail
