// Polling a lane's socket before sleeping on it (README "Polling for the answer"): the client
// polls for its call's answer (ClientOptions::lane_spin), the server's lane thread for the
// caller's next call (as_server --lane-spin). What a poll spares is the wake-up of a thread asleep
// in read(), which on a virtual machine costs a good part of a short round trip.
//
// Polling holds a CPU, so a process never has more threads polling at once than it has CPUs to
// spare (the CPUs it may run on, less one): none on one CPU, where the poller would hold the CPU
// the other side needs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>

namespace agentd::net {

// A poller's place among the process's (at most CPUs - 1 at once). taken() false: sleep instead.
class PollSlot {
 public:
  PollSlot();
  ~PollSlot();
  PollSlot(const PollSlot&) = delete;
  PollSlot& operator=(const PollSlot&) = delete;
  bool taken() const { return taken_; }

 private:
  bool taken_ = false;
};

// Non-blocking reads of fd into buf (at most n bytes) until some bytes come or `until` passes.
// Returns what recv() last returned: > 0 bytes read, 0 the end of the stream, -1 with errno
// (EAGAIN: nothing came by `until`; anything else: the socket's error).
ssize_t recv_until(int fd, void* buf, std::size_t n, std::chrono::steady_clock::time_point until);

// One read of a lane's stream: while `slot` holds a taken place, polls until `until`; when nothing
// came by then, gives the place up (slot empty) and sleeps in read() as a stream that does not
// poll. Returns what recv()/read() returned (-1 with errno; EAGAIN only from read(): the socket's
// SO_RCVTIMEO ran out). The rule of when to poll is the caller's: it emplaces `slot` or not.
ssize_t read_polling(int fd, void* buf, std::size_t n, std::optional<PollSlot>& slot,
                     std::chrono::steady_clock::time_point until);

}  // namespace agentd::net
