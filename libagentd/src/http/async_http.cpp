#include "async_http.h"

#include "bridge.h"
#include "curl_transfer.h"
#include "worker_pool.h"

#include <agentd/error.h>

#include <curl/curl.h>
#include <poll.h>
#include <sys/resource.h>

#include <chrono>
#include <mutex>
#include <utility>

namespace agentd::detail {
namespace {
// Easy handles kept for reuse (each holds its buffers: reusing one spares a few allocations).
constexpr std::size_t kMaxIdleEasyHandles = 1024;
}  // namespace

// One transfer in flight. Owns copies of its request and sink: when it is dropped while libcurl
// is calling us, libcurl still reads them until the transfer is removed after that call.
struct AsyncHttp::Transfer {
  std::uint64_t id = 0;
  HttpRequest request;
  BodySink user_sink;
  BodySink sink;  // calls user_sink unless cancelled
  CURL* easy = nullptr;
  std::unique_ptr<CurlTransfer> curl;
  kj::Own<kj::PromiseFulfiller<HttpAttempt>> fulfiller;
  kj::Promise<void> watchdog = nullptr;  // streams: the idle timeout
  Shard* shard = nullptr;                // whose multi handle runs it
  bool cancelled = false;

  ~Transfer() {
    curl.reset();  // unhooks the header list first
    if (easy != nullptr) curl_easy_cleanup(easy);
  }
};

// One multi handle with its connections (see "Shards" in async_http.h).
struct AsyncHttp::Shard {
  AsyncHttp* http = nullptr;
  CURLM* multi = nullptr;
  std::size_t transfers = 0;  // in flight here
  bool timeout_due = false;   // libcurl's timer ran out: drive() tells it
  kj::Promise<void> timer_wait = nullptr;

  ~Shard() {
    if (multi != nullptr) curl_multi_cleanup(multi);  // closes its cached connections
  }
};

// One socket libcurl asked us to watch. The waits only report readiness (ready()); drive() acts
// on it, so a watch may be destroyed whenever libcurl says so (never from inside its own waits).
struct AsyncHttp::Watch {
  Watch(AsyncHttp& http, Shard& shard, int fd, std::uint64_t id)
      : http(http),
        shard(shard),
        fd(fd),
        id(id),
        observer(http.port_, fd, kj::UnixEventPort::FdObserver::OBSERVE_READ_WRITE) {}

  // Waits for what libcurl wants and is not yet waited for. Edge-triggered observers only report
  // new readiness, so a socket already ready (checked with poll) is reported at once instead.
  void arm() {
    short events = 0;
    if ((want & CURL_POLL_IN) != 0 && !reading) events |= POLLIN;
    if ((want & CURL_POLL_OUT) != 0 && !writing) events |= POLLOUT;
    if (events == 0) return;
    pollfd p{fd, events, 0};
    if (::poll(&p, 1, 0) < 0) p.revents = events;  // let libcurl find out what is wrong
    int now = 0;
    if ((events & POLLIN) != 0) {
      if ((p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0) {
        now |= CURL_CSELECT_IN;
      } else {
        reading = true;
        read_wait = observer.whenBecomesReadable()
                        .then([this] {
                          reading = false;
                          http.ready(fd, id, CURL_CSELECT_IN);
                        })
                        .eagerlyEvaluate(nullptr);
      }
    }
    if ((events & POLLOUT) != 0) {
      if ((p.revents & (POLLOUT | POLLHUP | POLLERR | POLLNVAL)) != 0) {
        now |= CURL_CSELECT_OUT;
      } else {
        writing = true;
        write_wait = observer.whenBecomesWritable()
                         .then([this] {
                           writing = false;
                           http.ready(fd, id, CURL_CSELECT_OUT);
                         })
                         .eagerlyEvaluate(nullptr);
      }
    }
    if (now != 0) http.ready(fd, id, now);
  }

  void set_want(int what) {
    want = what;
    if ((want & CURL_POLL_IN) == 0 && reading) {
      read_wait = nullptr;
      reading = false;
    }
    if ((want & CURL_POLL_OUT) == 0 && writing) {
      write_wait = nullptr;
      writing = false;
    }
    arm();
  }

  AsyncHttp& http;
  Shard& shard;  // whose multi handle owns the socket
  int fd;
  std::uint64_t id;
  kj::UnixEventPort::FdObserver observer;  // declared before the waits, destroyed after them
  int want = 0;
  bool reading = false;
  bool writing = false;
  kj::Promise<void> read_wait = nullptr;
  kj::Promise<void> write_wait = nullptr;
};

struct AsyncHttp::Gate {
  std::size_t limit = 1;
  std::size_t held = 0;
  std::deque<kj::Own<kj::PromiseFulfiller<kj::Own<Permit>>>> waiting;

  // A holder left: its place passes to the first caller still waiting (unless the limit went
  // down meanwhile).
  void release() {
    if (held <= limit && hand_over()) return;
    --held;
  }

  // Admits waiting callers while places are free (after a raised limit).
  void pump() {
    while (held < limit && hand_over()) ++held;
  }

  bool hand_over() {
    while (!waiting.empty()) {
      auto next = kj::mv(waiting.front());
      waiting.pop_front();
      if (next->isWaiting()) {  // else its caller gave up
        next->fulfill(kj::heap<Permit>(*this));
        return true;
      }
    }
    return false;
  }
};

AsyncHttp::Permit::~Permit() { gate_.release(); }

// The blocking calls handed to the worker pool, by id; loop thread only. Shared with the workers
// only so that what they post back can find it (or find it gone).
struct AsyncHttp::OffloadTable {
  struct Call {
    kj::Own<kj::PromiseFulfiller<void>> done;
    ChunkCallback on_chunk;
  };
  std::map<std::uint64_t, Call> calls;
  std::uint64_t next_id = 0;
};

struct AsyncHttp::RetryState {
  CallSite site;
  RetryPolicy policy;
  HttpRequest request;
  BodySink sink;
  std::string url;
};

namespace {
thread_local AsyncHttp* t_current_http = nullptr;
}  // namespace

AsyncHttp* current_async_http() { return t_current_http; }

AsyncHttp::AsyncHttp(kj::AsyncIoContext& io, WorkerPool* pool, Bridge* bridge)
    : previous_current_(t_current_http),
      port_(io.unixEventPort),
      timer_(io.provider->getTimer()),
      pool_(pool),
      bridge_(bridge),
      offload_(std::make_shared<OffloadTable>()),
      tasks_(task_errors_) {
  init_curl_once();
  share_ = curl_share_init();
  if (share_ == nullptr) throw Error(ErrorCode::internal, "cannot create a libcurl share handle");
  curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  // Idle connections kept for reuse: up to half the file descriptor limit in all (libcurl's
  // default, four per transfer in flight, closes most of a burst's connections as it winds
  // down), kShardTransfers or more per shard, so at most that many shards.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const std::size_t idle = std::max<std::size_t>(16, files.rlim_cur / 2);
    max_shards_ = std::max<std::size_t>(1, idle / kShardTransfers);
    shard_max_connects_ = static_cast<long>(idle / max_shards_);
  } else {
    max_shards_ = 64;
  }
  t_current_http = this;
}

AsyncHttp::~AsyncHttp() {
  if (t_current_http == this) t_current_http = previous_current_;
  driving_ = true;  // nothing below may schedule work
  for (auto& [id, t] : transfers_) detach(*t);
  transfers_.clear();
  for (void* easy : idle_easy_) curl_easy_cleanup(easy);
  shards_.clear();  // closes the cached connections (their watches go first)
  sockets_.clear();
  curl_share_cleanup(share_);  // after every easy handle that used it
  offload_->calls.clear();
}

AsyncHttp::Shard* AsyncHttp::shard_for_new_transfer() {
  Shard* least = nullptr;
  for (auto& shard : shards_) {
    if (shard->transfers < kShardTransfers) return shard.get();
    if (least == nullptr || shard->transfers < least->transfers) least = shard.get();
  }
  if (least != nullptr && shards_.size() >= max_shards_) return least;
  auto shard = std::make_unique<Shard>();
  shard->http = this;
  shard->multi = curl_multi_init();
  if (shard->multi == nullptr) return least;  // null when there is none
  curl_multi_setopt(shard->multi, CURLMOPT_SOCKETFUNCTION, &AsyncHttp::on_socket);
  curl_multi_setopt(shard->multi, CURLMOPT_SOCKETDATA, shard.get());
  curl_multi_setopt(shard->multi, CURLMOPT_TIMERFUNCTION, &AsyncHttp::on_timer);
  curl_multi_setopt(shard->multi, CURLMOPT_TIMERDATA, shard.get());
  if (shard_max_connects_ > 0) curl_multi_setopt(shard->multi, CURLMOPT_MAXCONNECTS, shard_max_connects_);
  shards_.push_back(std::move(shard));
  return shards_.back().get();
}

int AsyncHttp::on_socket(void* /*easy*/, int fd, int what, void* shard_ptr, void* /*socketp*/) {
  auto& shard = *static_cast<Shard*>(shard_ptr);
  auto& self = *shard.http;
  if (what == CURL_POLL_REMOVE) {
    self.sockets_.erase(fd);  // before libcurl closes fd: its number may come back at once
    return 0;
  }
  auto& watch = self.sockets_[fd];
  if (!watch) watch = std::make_unique<Watch>(self, shard, fd, ++self.next_id_);
  watch->set_want(what);
  return 0;
}

int AsyncHttp::on_timer(void* /*multi*/, long timeout_ms, void* shard_ptr) {
  auto& shard = *static_cast<Shard*>(shard_ptr);
  shard.timer_wait = nullptr;  // its continuation only sets a flag: never running now
  if (timeout_ms < 0) return 0;
  if (timeout_ms == 0) {
    shard.timeout_due = true;
    shard.http->schedule();
    return 0;
  }
  shard.timer_wait = shard.http->timer_.afterDelay(timeout_ms * kj::MILLISECONDS)
                         .then([&shard] {
                           shard.timeout_due = true;
                           shard.http->schedule();
                         })
                         .eagerlyEvaluate(nullptr);
  return 0;
}

void AsyncHttp::ready(int fd, std::uint64_t watch_id, int mask) {
  ready_.push_back(Ready{fd, watch_id, mask});
  schedule();
}

void AsyncHttp::schedule() {
  if (scheduled_) return;
  scheduled_ = true;
  tasks_.add(kj::evalLater([this] {
    scheduled_ = false;
    drive();
  }));
}

// The one place libcurl's transfers make progress: a task of tasks_, never inside a watch's or
// the timer's own promise (libcurl's callbacks may destroy those).
void AsyncHttp::drive() {
  int running = 0;
  driving_ = true;
  // By index: what libcurl calls back (a sink) could start a transfer in a new shard.
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    Shard& shard = *shards_[i];
    if (shard.timeout_due) {
      shard.timeout_due = false;
      curl_multi_socket_action(shard.multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
  }
  std::vector<Ready> batch;
  batch.swap(ready_);
  for (const Ready& r : batch) {
    auto it = sockets_.find(r.fd);
    if (it == sockets_.end() || it->second->id != r.watch_id) continue;  // closed since
    curl_multi_socket_action(it->second->shard.multi, r.fd, r.mask, &running);
    it = sockets_.find(r.fd);
    if (it != sockets_.end() && it->second->id == r.watch_id) it->second->arm();
  }
  driving_ = false;
  finish_done();
}

void AsyncHttp::finish_done() {
  for (std::size_t i = 0; i < shards_.size(); ++i) {  // by index, as in drive()
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(shards_[i]->multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      CURLcode rc = msg->data.result;  // read before removing: msg dies with the handle's removal
      if (t != nullptr) complete(*t, rc);
    }
  }
  for (std::uint64_t id : std::exchange(stalled_, {})) {
    if (auto it = transfers_.find(id); it != transfers_.end()) {
      it->second->curl->mark_idle_timeout();
      complete(*it->second, CURLE_OPERATION_TIMEDOUT);
    }
  }
  for (std::uint64_t id : std::exchange(cancelled_, {})) {
    if (auto it = transfers_.find(id); it != transfers_.end()) {
      detach(*it->second);
      transfers_.erase(it);
    }
  }
}

void AsyncHttp::complete(Transfer& t, int curl_code) {
  const std::uint64_t id = t.id;
  driving_ = true;
  detach(t);
  driving_ = false;
  if (!t.cancelled) {
    try {
      t.fulfiller->fulfill(t.curl->finish(static_cast<CURLcode>(curl_code)));
    } catch (...) {  // what the sink threw
      t.fulfiller->reject(to_kj_exception(std::current_exception()));
    }
  }
  recycle(t);
  transfers_.erase(id);
}

void AsyncHttp::detach(Transfer& t) {
  if (t.shard == nullptr) return;
  curl_multi_remove_handle(t.shard->multi, t.easy);
  --t.shard->transfers;
  t.shard = nullptr;
}

void AsyncHttp::recycle(Transfer& t) {
  t.curl.reset();  // unhooks the header list
  if (idle_easy_.size() < kMaxIdleEasyHandles) {
    curl_easy_reset(t.easy);
    idle_easy_.push_back(t.easy);
  } else {
    curl_easy_cleanup(t.easy);
  }
  t.easy = nullptr;
}

void AsyncHttp::cancel(std::uint64_t id) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return;  // finished
  it->second->cancelled = true;
  if (driving_) {  // libcurl is calling us (e.g. a sink dropped its own request): remove it after
    cancelled_.push_back(id);
    schedule();
    return;
  }
  driving_ = true;
  detach(*it->second);
  driving_ = false;
  recycle(*it->second);
  transfers_.erase(it);
}

kj::Promise<HttpAttempt> AsyncHttp::post(HttpRequest request, BodySink sink) {
  auto t = std::make_unique<Transfer>();
  t->id = ++next_id_;
  t->request = std::move(request);
  t->user_sink = std::move(sink);
  Transfer* raw = t.get();
  if (t->user_sink) {
    t->sink = [raw](std::string_view bytes) {
      if (raw->cancelled) throw Error(ErrorCode::internal, "request cancelled");  // aborts the transfer
      raw->user_sink(bytes);
    };
  }
  if (!idle_easy_.empty()) {
    t->easy = idle_easy_.back();
    idle_easy_.pop_back();
  } else {
    t->easy = curl_easy_init();
  }
  if (t->easy == nullptr) {
    HttpAttempt a;
    a.failure = HttpAttempt::Failure::fatal;
    a.error = "cannot create a libcurl handle";
    return a;
  }
  t->curl = std::make_unique<CurlTransfer>(t->easy, t->request, t->sink);
  curl_easy_setopt(t->easy, CURLOPT_PRIVATE, raw);
  curl_easy_setopt(t->easy, CURLOPT_SHARE, share_);
  auto paf = kj::newPromiseAndFulfiller<HttpAttempt>();
  t->fulfiller = kj::mv(paf.fulfiller);
  if (t->request.stream) {
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(t->request.timeout).count();
    t->watchdog =
        idle_watchdog(t->id, std::max<std::int64_t>(1, timeout) * kj::MILLISECONDS).eagerlyEvaluate(nullptr);
  }
  const std::uint64_t id = t->id;
  Shard* shard = shard_for_new_transfer();
  if (shard == nullptr) {
    HttpAttempt a;
    a.failure = HttpAttempt::Failure::fatal;
    a.error = "cannot create a libcurl multi handle";
    return a;
  }
  transfers_.emplace(id, std::move(t));
  driving_ = true;
  CURLMcode rc = curl_multi_add_handle(shard->multi, raw->easy);
  driving_ = false;
  if (rc == CURLM_OK) {
    raw->shard = shard;
    ++shard->transfers;
  } else {
    transfers_.erase(id);
    HttpAttempt a;
    a.failure = HttpAttempt::Failure::fatal;
    a.error = std::string("cannot start the transfer: ") + curl_multi_strerror(rc);
    return a;
  }
  return paf.promise.attach(kj::defer([this, id] { cancel(id); }));
}

// Streams: fails a transfer that received nothing for its timeout (checked when it could have
// run out, so never late by more than a loop turn).
kj::Promise<void> AsyncHttp::idle_watchdog(std::uint64_t id, kj::Duration wait) {
  return timer_.afterDelay(wait).then([this, id]() -> kj::Promise<void> {
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return kj::READY_NOW;
    const Transfer& t = *it->second;
    auto idle = std::chrono::steady_clock::now() - t.curl->last_activity();
    if (idle >= t.request.timeout) {
      stalled_.push_back(id);  // completed by drive(), not here (this promise belongs to t)
      schedule();
      return kj::READY_NOW;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t.request.timeout - idle).count();
    return idle_watchdog(id, std::max<std::int64_t>(1, left) * kj::MILLISECONDS);
  });
}

kj::Promise<HttpResponse> AsyncHttp::post_with_retries(CallSite site, RetryPolicy policy, HttpRequest request,
                                                       BodySink sink) {
  auto state = kj::heap<RetryState>();
  state->site = site;
  state->policy = policy;
  state->url = url_for_messages(request.url);
  state->request = std::move(request);
  state->sink = std::move(sink);
  auto& s = *state;
  return attempt_loop(s, 0).attach(kj::mv(state));
}

kj::Promise<HttpResponse> AsyncHttp::attempt_loop(RetryState& s, int attempt_no) {
  return post(s.request, s.sink).then([this, &s, attempt_no](HttpAttempt a) -> kj::Promise<HttpResponse> {
    RetryStep step =
        rethrow_as_kj([&] { return next_retry_step(s.site, s.policy, s.url, attempt_no, std::move(a)); });
    if (step.response) return kj::mv(*step.response);
    return timer_.afterDelay(step.wait.count() * kj::MILLISECONDS).then([this, &s, attempt_no] {
      return attempt_loop(s, attempt_no + 1);
    });
  });
}

kj::Promise<kj::Own<AsyncHttp::Permit>> AsyncHttp::admit(const std::string& key, std::size_t limit) {
  auto& gate = gates_[key];
  if (!gate) gate = std::make_unique<Gate>();
  gate->limit = std::max<std::size_t>(1, limit);
  gate->pump();
  if (gate->held < gate->limit && gate->waiting.empty()) {
    ++gate->held;
    return kj::heap<Permit>(*gate);
  }
  auto paf = kj::newPromiseAndFulfiller<kj::Own<Permit>>();
  gate->waiting.push_back(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

kj::Promise<void> AsyncHttp::offload(std::function<void(const Emit& emit)> work, ChunkCallback on_chunk) {
  if (pool_ == nullptr || bridge_ == nullptr) {
    return kj::Promise<void>(to_kj_exception(std::make_exception_ptr(Error(
        ErrorCode::internal, "this model has no asynchronous path and no worker pool was given to run it"))));
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  const std::uint64_t id = ++offload_->next_id;
  offload_->calls.emplace(id, OffloadTable::Call{kj::mv(paf.fulfiller), std::move(on_chunk)});

  // Posts the outcome back once, also when the pool drops the work unrun (the job's destructor).
  struct Job {
    std::weak_ptr<OffloadTable> table;
    Bridge* bridge;
    std::uint64_t id;
    bool posted = false;
    void post_outcome(std::exception_ptr error) {
      posted = true;
      bridge->post([table = table, id = id, error] {
        auto live = table.lock();
        if (!live) return;
        auto it = live->calls.find(id);
        if (it == live->calls.end()) return;  // the caller gave up
        if (error) {
          it->second.done->reject(to_kj_exception(error));
        } else {
          it->second.done->fulfill();
        }
        live->calls.erase(it);
      });
    }
    ~Job() {
      if (!posted) {
        post_outcome(std::make_exception_ptr(
            Error(ErrorCode::stopping, "the worker pool stopped before the model call ran")));
      }
    }
  };
  auto job = std::make_shared<Job>();
  job->table = offload_;
  job->bridge = bridge_;
  job->id = id;
  pool_->submit([job, work = std::move(work)]() mutable {
    Emit emit = [job](std::string_view chunk) {
      job->bridge->post([table = job->table, id = job->id, text = std::string(chunk)] {
        auto live = table.lock();
        if (!live) return;
        auto it = live->calls.find(id);
        if (it != live->calls.end() && it->second.on_chunk) it->second.on_chunk(text);
      });
    };
    std::exception_ptr error;
    try {
      work(emit);
    } catch (...) {
      error = std::current_exception();
    }
    job->post_outcome(error);
  });
  return paf.promise.attach(kj::defer([table = offload_, id] { table->calls.erase(id); }));
}

}  // namespace agentd::detail
