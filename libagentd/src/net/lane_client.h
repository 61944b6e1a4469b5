// The client side of a synchronous lane (schemas/agentd.capnp, LaneHello; README "The
// synchronous lane"): a blocking connection of one caller to a server's port that carries one
// call at a time in Cap'n Proto's stream framing, read and written on the calling thread (no
// event loop, no RPC). The client library's lanes (client/lanes.h), agentd-bench's bare lane rows
// and the lane tests use it.
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>

#include "outcome.h"

#include <chrono>
#include <memory>
#include <string>

namespace kj {
class BufferedInputStreamWrapper;
}  // namespace kj

namespace agentd::detail {

class LaneClient {
 public:
  // Connects to host:port (host "unix:PATH" for a Unix socket; port then unused) and says hello
  // with token. Throws Error: the server's refusal (unauthenticated; overloaded when its lane
  // threads are taken: the RPC connection still serves), or disconnected (it cannot be reached,
  // does not serve lanes, or did not answer within timeout).
  static LaneClient connect(const std::string& host, int port, const std::string& token,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));
  LaneClient(LaneClient&& other) noexcept;
  LaneClient& operator=(LaneClient&& other) noexcept;
  LaneClient(const LaneClient&) = delete;
  LaneClient& operator=(const LaneClient&) = delete;
  ~LaneClient();

  // A reply of agent_id to input (null: no input) under call_id (unique per server, as a
  // placeholder's: new_id()). Returns its outcome (the message, or the error the call failed
  // with); timeout > 0 is the call's deadline on the server. Throws Error(disconnected) when the
  // lane breaks (the call may have run: look it up by call id on the RPC connection).
  // wait > 0: an answer not there within wait throws Error(timeout) and closes the lane (the
  // call goes on on the server).
  Outcome reply(const std::string& agent_id, const std::string& call_id, const Msg* input,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
                std::chrono::milliseconds wait = std::chrono::milliseconds(0));

  // The server's id (AgentServer.info's), told in its welcome.
  const std::string& server_id() const { return server_id_; }
  int fd() const { return fd_; }
  // Whether a call may be written on this lane now (else open a new one): not when the server
  // may be closing it for idleness (--lane-idle-timeout, told in its welcome: no call for half
  // that time), nor, after a pause of kProbeAfter, when the server has closed it (it restarted,
  // or reloaded its tokens). A call written to a lane already gone would otherwise come back as
  // not_applied. Calls in a quick series skip the probe (a system call): a server lost between
  // two of them is noticed at the next, as on the RPC connection.
  static constexpr std::chrono::milliseconds kProbeAfter{1};
  bool usable(std::chrono::steady_clock::time_point now) const;

  // How long reply() polls the socket for its answer before it sleeps in read() (0: never;
  // ClientOptions::lane_spin, net/lane_poll.h). Adaptive: the lane polls for a call only when its
  // previous answer came within spin, so a lane whose calls take longer (a model's, a durable
  // commit's) sleeps at once and costs no CPU; one quick answer turns polling back on.
  void set_spin(std::chrono::microseconds spin);
  // Whether the next reply() polls for its answer.
  bool polls_next() const { return spin_.count() > 0 && spin_next_; }

 private:
  LaneClient(int fd, std::string where);
  [[noreturn]] void broken(const std::string& what, ErrorCode code = ErrorCode::disconnected);

  class Input;

  int fd_ = -1;
  // Answers are read through a buffer: a message's segment table and segments in one read.
  std::unique_ptr<Input> raw_;
  std::unique_ptr<kj::BufferedInputStreamWrapper> in_;
  std::string where_;  // "host:port", for errors
  std::string server_id_;
  std::chrono::milliseconds receive_timeout_{0};  // the socket's SO_RCVTIMEO (0: none)
  std::chrono::milliseconds idle_close_{0};       // the server's --lane-idle-timeout (0: never)
  std::chrono::steady_clock::time_point last_used_ = std::chrono::steady_clock::now();  // last answer
  bool broken_ = false;               // a call on it failed: it carries no more
  std::chrono::nanoseconds spin_{0};  // set_spin's
  bool spin_next_ = true;             // the last answer came within spin_
};

}  // namespace agentd::detail
