#include "lane_client.h"

#include "accept.h"
#include "lane_poll.h"
#include "outcome_codec.h"
#include "value_codec.h"
#include "wire_limits.h"

#include "agentd.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace agentd::detail {

namespace {

int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, std::string& why) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    why = fmt::format("cannot resolve {}: {}", host, ::gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    net::set_socket_timeout(fd, SO_SNDTIMEO, timeout);  // bounds connect() too
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

int connect_unix(const std::string& path, std::string& why) {
  sockaddr_un sa{};
  if (path.size() >= sizeof sa.sun_path) {
    why = "the socket path is too long";
    return -1;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

// Waits until fd has something to read (or timeout): false on timeout.
bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

}  // namespace

// The lane's socket as a kj::InputStream for the answer's reader: read() as kj::FdInputStream
// does, after polling (net/lane_poll.h) until spin_until when that is set.
class LaneClient::Input final : public kj::InputStream {
 public:
  explicit Input(int fd) : fd_(fd) {}

  // Until when the next reads poll; the epoch: they sleep at once.
  std::chrono::steady_clock::time_point spin_until{};

  size_t tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    auto* at = static_cast<std::byte*>(buffer);
    std::size_t got = 0;
    std::optional<net::PollSlot> slot;
    if (spin_until != std::chrono::steady_clock::time_point{}) slot.emplace();
    while (got < min_bytes) {
      const ssize_t n = net::read_polling(fd_, at + got, max_bytes - got, slot, spin_until);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
      } else if (n == 0) {
        break;  // the server closed the lane: fewer than min_bytes is the reader's error to raise
      } else if (errno != EINTR) {
        // EAGAIN from read(): SO_RCVTIMEO (reply()'s wait) ran out.
        KJ_FAIL_SYSCALL("read(lane)", errno);
      }
    }
    return got;
  }

 private:
  int fd_;
};

LaneClient LaneClient::connect(const std::string& host, int port, const std::string& token,
                               std::chrono::milliseconds timeout) {
  const bool unix_socket = host.rfind("unix:", 0) == 0;
  const std::string where = unix_socket ? host : fmt::format("{}:{}", host, port);
  std::string why;
  int fd = unix_socket ? connect_unix(host.substr(5), why) : connect_tcp(host, port, timeout, why);
  if (fd < 0)
    throw Error(ErrorCode::disconnected, fmt::format("cannot open a lane to {}: {}", where, why), "", "",
                true);
  LaneClient lane(fd, where);
  try {
    capnp::MallocMessageBuilder hello(64);
    hello.initRoot<wire::LaneHello>().setToken(to_kj(token));
    kj::FdOutputStream out(fd);
    out.write(net::kLaneMagic, 8);
    capnp::writeMessage(out, hello);
    if (!readable_within(fd, timeout)) lane.broken(fmt::format("no welcome within {} ms", timeout.count()));
    capnp::ReaderOptions limits;
    limits.traversalLimitInWords = 64 * 1024 / sizeof(capnp::word);
    capnp::InputStreamMessageReader welcome(*lane.in_, limits);
    auto w = welcome.getRoot<wire::LaneWelcome>();
    lane.server_id_ = to_std(w.getServerId());
    lane.idle_close_ = std::chrono::milliseconds(w.getIdleCloseMs());
    lane.last_used_ = std::chrono::steady_clock::now();
    if (w.isRefused()) throw read_error(w.getRefused());
  } catch (const kj::Exception& e) {
    // The server closed it: it does not serve lanes (--lane-threads 0), or is not an as_server.
    lane.broken(e.getDescription().cStr());
  }
  return lane;
}

LaneClient::LaneClient(int fd, std::string where)
    : fd_(fd),
      raw_(std::make_unique<Input>(fd)),
      in_(std::make_unique<kj::BufferedInputStreamWrapper>(*raw_)),
      where_(std::move(where)) {}

LaneClient::LaneClient(LaneClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      raw_(std::move(other.raw_)),
      in_(std::move(other.in_)),
      where_(std::move(other.where_)),
      server_id_(std::move(other.server_id_)),
      receive_timeout_(other.receive_timeout_),
      idle_close_(other.idle_close_),
      last_used_(other.last_used_),
      broken_(other.broken_),
      spin_(other.spin_),
      spin_next_(other.spin_next_) {}

LaneClient& LaneClient::operator=(LaneClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    in_ = std::move(other.in_);
    raw_ = std::move(other.raw_);
    where_ = std::move(other.where_);
    server_id_ = std::move(other.server_id_);
    receive_timeout_ = other.receive_timeout_;
    idle_close_ = other.idle_close_;
    last_used_ = other.last_used_;
    broken_ = other.broken_;
    spin_ = other.spin_;
    spin_next_ = other.spin_next_;
  }
  return *this;
}

LaneClient::~LaneClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool LaneClient::usable(std::chrono::steady_clock::time_point now) const {
  if (fd_ < 0 || broken_) return false;
  const auto idle = now - last_used_;
  if (idle_close_.count() > 0 && idle >= idle_close_ / 2) return false;
  if (idle < kProbeAfter) return true;
  // Between calls the server sends nothing: anything to read is its close (or a reset).
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

void LaneClient::set_spin(std::chrono::microseconds spin) { spin_ = spin; }

void LaneClient::broken(const std::string& what, ErrorCode code) {
  // The socket stays open until this object goes (its owner may be shutting it from another
  // thread: client/lanes.h), but carries nothing more.
  broken_ = true;
  throw Error(code, fmt::format("the lane to {} broke: {}", where_, what), "", "", true);
}

Outcome LaneClient::reply(const std::string& agent_id, const std::string& call_id, const Msg* input,
                          std::chrono::milliseconds timeout, std::chrono::milliseconds wait) {
  if (fd_ < 0 || broken_) broken("it was closed");
  std::chrono::steady_clock::time_point sent{};
  try {
    capnp::MallocMessageBuilder mb(input != nullptr ? 256 : 64);
    auto call = mb.initRoot<wire::LaneCall>();
    call.setAgentId(to_kj(agent_id));
    call.setCallId(to_kj(call_id));
    if (input != nullptr) write_msg(*input, call.initInput());
    if (timeout.count() > 0) call.setTimeoutMs(static_cast<std::uint32_t>(timeout.count()));
    if (wait != receive_timeout_) {
      // The socket's own timeout bounds the read below (no poll() before each answer).
      net::set_socket_timeout(fd_, SO_RCVTIMEO, wait);
      receive_timeout_ = wait;
    }
    capnp::writeMessageToFd(fd_, mb);
    sent = std::chrono::steady_clock::now();
    const bool spin = spin_.count() > 0 && spin_next_;
    raw_->spin_until = spin ? sent + spin_ : std::chrono::steady_clock::time_point{};
    capnp::ReaderOptions limits = wire_reader_options();
    limits.traversalLimitInWords = kMaxMessageBytes / sizeof(capnp::word) + 64;
    capnp::InputStreamMessageReader answer(*in_, limits);
    auto a = answer.getRoot<wire::LaneAnswer>();
    if (to_std(a.getCallId()) != call_id) broken("it answered another call than the one sent");
    last_used_ = std::chrono::steady_clock::now();
    spin_next_ = last_used_ - sent <= spin_;
    return read_outcome(a.getOutcome());
  } catch (const kj::Exception& e) {
    if (wait.count() > 0 && sent != std::chrono::steady_clock::time_point{} &&
        std::chrono::steady_clock::now() - sent >= wait)
      broken(fmt::format("the reply of agent {} (call {}) was not there within {} ms", agent_id, call_id,
                         wait.count()),
             ErrorCode::timeout);
    broken(e.getDescription().cStr());
  }
}

}  // namespace agentd::detail
