#include "lanes.h"

#include "accept.h"
#include "call_queue.h"
#include "connection_guard.h"
#include "lane_poll.h"
#include "outcome_codec.h"
#include "value_codec.h"
#include "wire_limits.h"

#include <capnp/serialize.h>
#include <kj/io.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <condition_variable>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {

// Reads a lane's socket. While a deadline is set (its hello's: --login-timeout), the bytes asked
// for must all come by then, however they trickle in (a socket's receive timeout bounds each read
// alone). After it, one read() per call, as a blocking read is, so the idle deadline costs the hot
// path nothing: a read that finds nothing for the socket's receive timeout (--lane-idle-timeout,
// SO_RCVTIMEO) ends the lane as idle.
//
// After each answer (answered()) the next call is polled for, up to --lane-spin, before the read
// sleeps, while the caller's calls come within that time of the answer before them (net/lane_poll.h).
class LaneInput final : public kj::InputStream {
 public:
  LaneInput(int fd, std::chrono::microseconds spin) : fd_(fd), spin_(spin) {}
  void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) { deadline_ = deadline; }
  bool idle() const { return idle_; }
  // A call was answered: what the socket brings next is the caller's next call.
  void answered() {
    answered_at_ = std::chrono::steady_clock::now();
    awaiting_call_ = true;
  }

  size_t tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    auto* out = static_cast<kj::byte*>(buffer);
    size_t got = 0;
    std::optional<net::PollSlot> slot;
    if (awaiting_call_ && poll_next_ && spin_.count() > 0) slot.emplace();
    while (got < min_bytes) {
      if (deadline_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            *deadline_ - std::chrono::steady_clock::now());
        pollfd p{fd_, POLLIN, 0};
        const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0)
          throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                              kj::str("no complete hello within --login-timeout"));
      }
      const ssize_t n = net::read_polling(fd_, out + got, max_bytes - got, slot, answered_at_ + spin_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        idle_ = true;
        throw kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                            kj::str("no call within --lane-idle-timeout"));
      }
      if (n < 0)
        throw kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                            kj::str(std::strerror(errno)));
      if (n == 0) break;  // the end of the stream: fewer than min_bytes
      got += static_cast<size_t>(n);
      if (awaiting_call_) {
        awaiting_call_ = false;
        poll_next_ = std::chrono::steady_clock::now() - answered_at_ <= spin_;
      }
    }
    return got;
  }

 private:
  int fd_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  bool idle_ = false;
  const std::chrono::microseconds spin_;
  std::chrono::steady_clock::time_point answered_at_{};
  bool awaiting_call_ = false;  // answered, and the next call has not begun to come
  bool poll_next_ = true;       // the last call came within spin_ of the answer before it
};

void write_welcome(int fd, const std::optional<Error>& refused, const std::string& server_id,
                   std::chrono::milliseconds idle_close = {}) {
  capnp::MallocMessageBuilder mb(256);
  auto w = mb.initRoot<wire::LaneWelcome>();
  if (refused)
    write_error(*refused, w.initRefused());
  else
    w.setOk();
  w.setServerId(to_kj(server_id));
  w.setIdleCloseMs(static_cast<std::uint32_t>(idle_close.count()));
  capnp::writeMessageToFd(fd, mb);
}

OutcomePtr failed(Error e) { return std::make_shared<const Outcome>(Outcome(std::move(e))); }

// Where a lane's call's outcome lands: set by the thread that publishes it (most often the lane's
// own, inside run_here()).
struct Landing {
  std::mutex mu;
  std::condition_variable cv;
  OutcomePtr outcome;
};

}  // namespace

Lanes::Lanes(AgentHost& host, Options options, CheckLogin check)
    : host_(host), options_(std::move(options)), check_(std::move(check)) {}

Lanes::~Lanes() { stop(); }

void Lanes::adopt(int fd, std::string peer, bool tls_expected) {
  std::vector<std::thread> finished;
  {
    std::lock_guard lock(mu_);
    reap_locked(finished);
    if (!stopping_ && lanes_.size() < options_.max_lanes) {
      Lane& lane = lanes_.emplace_back();
      lane.fd = fd;
      lane.peer = std::move(peer);
      lane.tls_expected = tls_expected;
      lane.thread = std::thread([this, &lane] { serve(lane); });
      fd = -1;
    }
  }
  for (auto& t : finished) t.join();
  if (fd < 0) return;
  // Refused before its hello is read: a welcome on a fresh socket fits its send buffer, so this
  // write does not block the loop.
  refused_busy_.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("lane from {} refused: {} lanes open, the most --lane-threads allows", peer,
                options_.max_lanes);
  try {
    write_welcome(fd,
                  Error(ErrorCode::overloaded,
                        fmt::format("every lane thread of this server is taken (--lane-threads {}); "
                                    "use the RPC connection",
                                    options_.max_lanes),
                        "", "", true),
                  options_.server_id);
  } catch (const kj::Exception&) {
    // The client left already: nothing to tell.
  }
  ::close(fd);
}

void Lanes::reap_locked(std::vector<std::thread>& out) {
  for (auto it = lanes_.begin(); it != lanes_.end();) {
    if (it->done) {
      out.push_back(std::move(it->thread));
      it = lanes_.erase(it);
    } else {
      ++it;
    }
  }
}

std::size_t Lanes::close_unless(const std::function<bool(const TokenSet::Digest&)>& keep) {
  std::lock_guard lock(mu_);
  std::size_t closed = 0;
  for (Lane& lane : lanes_) {
    if (lane.done || !lane.token || keep(*lane.token)) continue;
    // Its thread sees the end of its stream at its next read (after a call running now).
    ::shutdown(lane.fd, SHUT_RDWR);
    ++closed;
  }
  return closed;
}

void Lanes::stop() {
  std::list<Lane> all;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (Lane& lane : lanes_)
      if (!lane.done) ::shutdown(lane.fd, SHUT_RDWR);
    all.splice(all.end(), lanes_);
  }
  for (Lane& lane : all)
    if (lane.thread.joinable()) lane.thread.join();
}

std::size_t Lanes::open() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const Lane& lane : lanes_) n += lane.done ? 0 : 1;
  return n;
}

std::uint64_t Lanes::calls() const { return calls_.load(std::memory_order_relaxed); }
std::uint64_t Lanes::refused_busy() const { return refused_busy_.load(std::memory_order_relaxed); }

void Lanes::serve(Lane& lane) {
  ::pthread_setname_np(::pthread_self(), "agentd-lane");  // as top -H and perf show it
  const int fd = lane.fd;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on a Unix socket
  LaneInput raw(fd, options_.spin);
  bool logged_in = false;
  try {
    std::string token;
    {
      // Before its login a lane may send what a connection may (64 KiB), within the login
      // deadline for the whole hello (read unbuffered: nothing past it is taken).
      raw.set_deadline(std::chrono::steady_clock::now() + options_.hello_timeout);
      capnp::ReaderOptions hello_limits;
      hello_limits.traversalLimitInWords = ConnectionGuard::kPreLoginBytes / sizeof(capnp::word);
      capnp::InputStreamMessageReader hello(raw, hello_limits);
      token = to_std(hello.getRoot<wire::LaneHello>().getToken());
      raw.set_deadline(std::nullopt);
    }
    std::optional<Error> refused;
    if (lane.tls_expected) {
      refused = Error(ErrorCode::unauthenticated,
                      "this server serves TLS only, and lanes are plaintext: use the RPC connection "
                      "(or the server's --unix-socket)");
    } else {
      auto verdict = check_(token, lane.peer);
      if (auto* e = std::get_if<Error>(&verdict)) {
        refused = *e;
      } else {
        std::lock_guard lock(mu_);
        lane.token = std::get<TokenSet::Digest>(verdict);
      }
    }
    write_welcome(fd, refused, options_.server_id, options_.idle_timeout);
    if (!refused) {
      logged_in = true;
      net::set_socket_timeout(fd, SO_RCVTIMEO, options_.idle_timeout);
      spdlog::debug("lane from {} open", lane.peer);
      // As the RPC connection's frames are read (values nested as deep as a value may be).
      capnp::ReaderOptions limits = wire_reader_options();
      limits.traversalLimitInWords = options_.max_message_bytes / sizeof(capnp::word) + 64;
      // Blocks until the next call or the end of the stream (a closed lane, or stop()).
      kj::BufferedInputStreamWrapper in(raw);
      while (in.tryGetReadBuffer().size() != 0) {
        capnp::InputStreamMessageReader message(in, limits);
        answer_one(lane, message.getRoot<wire::LaneCall>());
        raw.answered();
      }
    }
  } catch (const kj::Exception& e) {
    const bool quiet = e.getType() == kj::Exception::Type::DISCONNECTED;
    if (raw.idle()) {
      spdlog::debug("lane from {} closed: idle for --lane-idle-timeout", lane.peer);
    } else if (!logged_in)
      spdlog::log(quiet ? spdlog::level::debug : spdlog::level::warn,
                  "lane from {} closed before its hello was answered (within --login-timeout): {}", lane.peer,
                  e.getDescription().cStr());
    else
      spdlog::log(quiet ? spdlog::level::debug : spdlog::level::warn, "lane from {} closed: {}", lane.peer,
                  e.getDescription().cStr());
  } catch (const std::exception& e) {
    spdlog::warn("lane from {} closed: {}", lane.peer, e.what());
  }
  spdlog::debug("lane from {} ended", lane.peer);
  std::lock_guard lock(mu_);
  ::close(lane.fd);
  lane.fd = -1;
  lane.done = true;
}

namespace {

// One answer on a lane: the call id and an outcome (a message or an error, with the call's usage),
// of about size bytes.
void write_answer(int fd, const std::string& call_id, const CallUsage& usage, const Msg* msg,
                  const Error* error, std::size_t size) {
  capnp::MallocMessageBuilder mb(
      static_cast<unsigned>(std::min<std::size_t>(size / sizeof(capnp::word) + 64, 1u << 20)));
  auto answer = mb.initRoot<wire::LaneAnswer>();
  answer.setCallId(to_kj(call_id));
  auto out = answer.initOutcome();
  write_usage(usage, out);
  if (msg != nullptr)
    write_msg(*msg, out.initMsg());
  else
    write_error(*error, out.initError());
  capnp::writeMessageToFd(fd, mb);
}

}  // namespace

void Lanes::answer_one(const Lane& lane, wire::LaneCall::Reader call) {
  std::string call_id;
  OutcomePtr outcome;
  // The call's answer, written from inside the host when the call runs on this thread (see
  // EarlyAnswer): before the host's bookkeeping, which then overlaps the caller's next step.
  EarlyAnswer early;
  std::exception_ptr early_failure;  // writing it failed: the lane is closed, as below
  early.send = [&](const Call& c) {
    const Msg* msg = c.out_error ? nullptr : (c.out_msg ? &*c.out_msg : nullptr);
    const Error* error = c.out_error ? &*c.out_error : nullptr;
    if (msg == nullptr && error == nullptr) return false;
    const CallUsage usage = call_usage(c);
    const std::size_t size = outcome_size(usage, msg, error);
    if (size > options_.max_message_bytes) return false;  // answered below, as too large
    calls_.fetch_add(1, std::memory_order_relaxed);       // counted before its caller can read it
    try {
      write_answer(lane.fd, call_id, usage, msg, error, size);
    } catch (...) {
      early_failure = std::current_exception();
    }
    return true;
  };
  try {
    call_id = to_std(call.getCallId());
    outcome = run_call(call, early);
  } catch (const kj::Exception& e) {
    // A call the message's limits refuse (a value nested too deep, a broken pointer).
    outcome = failed(unreadable(e, "the call"));
  }
  if (early.sent) {
    if (early_failure) std::rethrow_exception(early_failure);
    return;
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  const std::size_t size = outcome_size(*outcome, 0);
  if (size > options_.max_message_bytes)
    outcome = failed(Error(ErrorCode::too_large,
                           fmt::format("the reply is {} bytes, more than one message may carry from this "
                                       "server ({} bytes, --max-message-bytes)",
                                       size, options_.max_message_bytes),
                           to_std(call.getAgentId())));
  write_answer(lane.fd, call_id, outcome->usage, std::get_if<Msg>(outcome.get()),
               std::get_if<Error>(outcome.get()), size);
}

OutcomePtr Lanes::run_call(wire::LaneCall::Reader in, EarlyAnswer& early) {
  std::string agent_id = to_std(in.getAgentId());
  std::string call_id = to_std(in.getCallId());
  if (call_id.empty())
    return failed(Error(ErrorCode::bad_request, "a lane call without a call id", agent_id));
  // Refused before anything is recorded: the client may send the same call again.
  if (auto full = host_.admit(agent_id)) return failed(*full);
  auto call = std::make_shared<Call>();
  call->kind = Call::Kind::reply;
  if (in.hasInput()) {
    if (auto unread = read_input(in.getInput(), agent_id, *call)) return failed(*unread);
  }
  set_caller_timeout(*call, std::chrono::milliseconds(in.getTimeoutMs()));
  auto landing = std::make_shared<Landing>();
  // Waits from before the call is queued, so its outcome cannot be evicted unseen.
  const bool announced = host_.announce_result_here(call_id, agent_id, [landing](const OutcomePtr& o) {
    {
      std::lock_guard lock(landing->mu);
      landing->outcome = o;
    }
    landing->cv.notify_one();
  });
  if (!announced) return failed(duplicate_call_id(host_, call_id, agent_id));
  call->call_id = call_id;
  early.call = call.get();
  {
    t_early_answer = &early;
    KJ_DEFER(t_early_answer = nullptr);  // when it ran elsewhere, or failed before running
    host_.run_here(agent_id, std::move(call));
  }
  std::unique_lock lock(landing->mu);
  // Most often set already (the call ran on this thread). Else it runs elsewhere (its agent was
  // busy, or is asynchronous) and its deadline, or the server's stop, bounds the wait.
  landing->cv.wait(lock, [&] { return landing->outcome != nullptr; });
  return landing->outcome;
}

}  // namespace agentd::detail
