// AsyncHttp: HTTP POSTs on a KJ event loop, without threads, for asynchronous model calls.
//
// One AsyncHttp per loop thread. Its transfers run on one libcurl multi handle driven by the
// loop (curl_multi_socket_action, its sockets watched with kj::UnixEventPort::FdObserver, its
// timeouts on the loop's kj::Timer), so connections to an endpoint are shared and kept alive
// across calls, and a thousand requests in flight cost sockets and memory, not threads. Requests,
// options and outcomes are those of the blocking client (http_client.h; the same CurlTransfer sets
// them up): timeouts, proxies from the environment, TLS defaults, headers, retries.
//
// It also keeps, per model config, the FIFO queue that bounds concurrent calls (max_concurrency),
// and runs blocking model calls on a worker pool for models without an asynchronous path.
//
// Threading: loop thread only (construct, call and destroy it there). Every promise it returns
// must be dropped or settled before it is destroyed. Dropping a promise cancels its request: the
// transfer is removed from the multi handle (its connection closed unless reusable), and its sink
// is not called again.
//
// Idle connections stay open for reuse up to half the soft file descriptor limit at construction
// (RLIMIT_NOFILE; raise it before constructing for many concurrent requests).
//
// Shards: libcurl (7.88) finds a connection to reuse by walking every connection it has to the
// host, in use or idle, so one multi handle with n transfers in flight costs O(n) per new
// request: with 10,000 model calls in flight, most of the server's CPU. Transfers are therefore
// spread over several multi handles (shards), each with its own connections: a new transfer goes
// to the first shard with fewer than kShardTransfers in flight, to a new shard when all are that
// full (up to as many as the idle-connection limit allows, then the least loaded). A caller alone
// always uses the first shard, and a burst's connections are found again by the next burst of the
// same size. The shards share one DNS cache and one TLS session cache (a libcurl share handle).
//
// Limits: a host name (not a numeric address) costs a short-lived resolver thread per lookup
// missing from the DNS cache (libcurl's threaded resolver); the cache is the share handle's, so
// it is shared by all transfers of this AsyncHttp, whichever shard runs them.
#pragma once

#include "http_client.h"

#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/async.h>
#include <kj/timer.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kj_errors.h"
#include "task_errors.h"

namespace agentd::detail {

class Bridge;
class WorkerPool;

// Receives each piece of streamed text, on the loop thread.
using ChunkCallback = std::function<void(std::string_view chunk)>;

class AsyncHttp;

// The AsyncHttp of the calling thread's loop (the newest one constructed on this thread and
// not yet destroyed), or null. Asynchronous agents' model calls (ChatModel::chat_async) use it.
AsyncHttp* current_async_http();

class AsyncHttp {
 public:
  // io's event port and timer drive the transfers. pool and bridge (optional; both or neither)
  // run blocking model calls for models without an asynchronous path: the bridge must lead into
  // this loop. io, pool and bridge are borrowed and outlive this object.
  explicit AsyncHttp(kj::AsyncIoContext& io, WorkerPool* pool = nullptr, Bridge* bridge = nullptr);
  ~AsyncHttp();
  AsyncHttp(const AsyncHttp&) = delete;
  AsyncHttp& operator=(const AsyncHttp&) = delete;

  // One POST, no retries: resolves with how it ended (any HTTP status, or a transport failure).
  // The bytes of a 2xx answer to a streaming request go to `sink` on the loop thread as they
  // arrive; what the sink throws rejects the promise (agentd::Error as to_kj_exception()).
  kj::Promise<HttpAttempt> post(HttpRequest request, BodySink sink = {});

  // POSTs with retries and backoff (on the loop's timer), exactly as the blocking
  // post_with_retries(): resolves with the 2xx response; rejects with an Error(model_error)
  // encoded by to_kj_exception(). site's strings are borrowed and outlive the promise.
  kj::Promise<HttpResponse> post_with_retries(CallSite site, RetryPolicy policy, HttpRequest request,
                                              BodySink sink = {});

  // A place among at most `limit` (at least 1) concurrent holders for `key` (a model config
  // name). Resolves at once while fewer are held; otherwise when the callers before it in FIFO
  // order have had theirs. Dropping the Permit frees the place; dropping the promise leaves the
  // queue. A new limit for a key applies from the next admission on.
  class Permit;
  kj::Promise<kj::Own<Permit>> admit(const std::string& key, std::size_t limit);

  // Runs work(emit) on the worker pool; chunks the work passes to emit (from its thread) reach
  // on_chunk on this loop, in order, before the promise resolves. Rejects with what work threw
  // (agentd::Error kept), or Error(stopping) if the pool dropped the work, or Error(internal) when
  // this AsyncHttp has no pool. Dropping the promise does not stop the work; its outcome and its
  // later chunks are discarded.
  using Emit = std::function<void(std::string_view chunk)>;
  kj::Promise<void> offload(std::function<void(const Emit& emit)> work, ChunkCallback on_chunk = {});

  kj::Timer& timer() { return timer_; }
  // Transfers in flight (started and not yet finished or cancelled).
  std::size_t transfers() const { return transfers_.size(); }
  // Sockets being watched for transfers now (idle kept-alive connections are not watched).
  std::size_t sockets() const { return sockets_.size(); }
  // Transfers in flight per shard, at most (see "Shards" above).
  static constexpr std::size_t kShardTransfers = 128;
  // Shards made so far (they stay, with their idle connections, until this is destroyed).
  std::size_t shards() const { return shards_.size(); }

 private:
  AsyncHttp* previous_current_;  // current_async_http() before this one
  struct Transfer;
  struct Watch;
  struct Gate;
  struct OffloadTable;
  struct RetryState;
  struct Shard;

  kj::Promise<HttpResponse> attempt_loop(RetryState& state, int attempt_no);
  void cancel(std::uint64_t id);
  // Removes a transfer from its shard's multi handle (once; it may be removed again harmlessly).
  void detach(Transfer& transfer);
  // Takes back a transfer's easy handle (removed from the multi handle) for reuse.
  void recycle(Transfer& transfer);
  void complete(Transfer& transfer, int curl_code);
  void ready(int fd, std::uint64_t watch_id, int mask);
  // The shard a new transfer goes to (see "Shards"); null when none exists and none can be made.
  Shard* shard_for_new_transfer();
  void schedule();
  void drive();
  void finish_done();
  kj::Promise<void> idle_watchdog(std::uint64_t id, kj::Duration wait);
  static int on_socket(void* easy, int fd, int what, void* self, void* socketp);
  static int on_timer(void* multi, long timeout_ms, void* self);

  kj::UnixEventPort& port_;
  kj::Timer& timer_;
  WorkerPool* pool_;
  Bridge* bridge_;
  void* share_ = nullptr;  // CURLSH*: the shards' DNS and TLS session caches
  std::vector<std::unique_ptr<Shard>> shards_;
  std::size_t max_shards_ = 1;
  long shard_max_connects_ = 0;  // CURLMOPT_MAXCONNECTS of each shard; 0: libcurl's default
  std::uint64_t next_id_ = 0;
  std::map<std::uint64_t, std::unique_ptr<Transfer>> transfers_;
  std::vector<void*> idle_easy_;  // reset easy handles (CURL*) ready for the next transfer
  std::unordered_map<int, std::unique_ptr<Watch>> sockets_;
  struct Ready {
    int fd;
    std::uint64_t watch_id;
    int mask;
  };
  std::vector<Ready> ready_;
  std::vector<std::uint64_t> stalled_;    // streams silent for longer than their timeout
  std::vector<std::uint64_t> cancelled_;  // dropped while libcurl was calling us
  bool scheduled_ = false;
  bool driving_ = false;  // inside a libcurl call (its callbacks may run)
  std::map<std::string, std::unique_ptr<Gate>, std::less<>> gates_;
  std::shared_ptr<OffloadTable> offload_;
  TaskErrors task_errors_{"async HTTP"};
  kj::TaskSet tasks_;  // drive() runs here; destroyed first
};

// A held place in a model config's concurrency queue (see AsyncHttp::admit). Loop thread only.
class AsyncHttp::Permit {
 public:
  explicit Permit(Gate& gate) : gate_(gate) {}
  ~Permit();
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;

 private:
  Gate& gate_;
};

}  // namespace agentd::detail
