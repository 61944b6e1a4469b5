// PreLoginQueue: the connections of one server that have not logged in yet, bounded in number
// and in time. Before its login a connection holds little (ConnectionGuard reads at most
// kPreLoginBytes from it) and only for a while: it is closed once the login deadline
// (--login-timeout) passes from its accept. At most max_connections such connections exist:
// admitting one more closes the one that has waited longest (a silent or slow connection, most
// likely hostile; real clients log in within milliseconds of connecting, so a flood of idle
// connections cannot keep them out). Closings are logged at warn, at most one line a second
// (with how many more went unlogged). Loop thread only.
#pragma once

#include <kj/async.h>
#include <kj/time.h>
#include <kj/timer.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>

namespace agentd::detail {

class PreLoginQueue;

// One connection's place in the queue; owned by the promise serving that connection.
class PreLoginSlot {
 public:
  PreLoginSlot(PreLoginQueue& queue, std::string peer);  // by PreLoginQueue::admit() only
  ~PreLoginSlot();
  PreLoginSlot(const PreLoginSlot&) = delete;
  PreLoginSlot& operator=(const PreLoginSlot&) = delete;

  // Settles when the connection must be closed before its login (a newer connection took its
  // place, or the deadline passed); never once logged_in() was called. Call once.
  kj::Promise<void> closing();
  // The login was accepted: leaves the queue; the deadline no longer applies.
  void logged_in();
  bool is_logged_in() const { return logged_in_; }

 private:
  friend class PreLoginQueue;
  void leave();

  PreLoginQueue& queue_;
  std::string peer_;
  kj::TimePoint admitted_;
  bool logged_in_ = false;
  bool queued_ = false;
  std::list<PreLoginSlot*>::iterator at_;
  kj::Own<kj::PromiseFulfiller<void>> evict_;
  kj::Promise<void> evicted_ = nullptr;
};

class PreLoginQueue {
 public:
  // timer is borrowed and outlives this queue and its slots; so does the queue its slots.
  PreLoginQueue(kj::Timer& timer, std::size_t max_connections, kj::Duration deadline);

  // A new connection from peer ("address:port"), closing the one waiting longest if there are
  // max_connections already.
  kj::Own<PreLoginSlot> admit(std::string peer);
  std::size_t size() const { return waiting_.size(); }
  // Connections closed before logging in since the start (evicted or past the deadline).
  std::uint64_t closed() const { return closed_; }

 private:
  friend class PreLoginSlot;
  void note(const std::string& line);

  kj::Timer& timer_;
  std::size_t max_;
  kj::Duration deadline_;
  std::list<PreLoginSlot*> waiting_;  // oldest first
  std::uint64_t closed_ = 0;
  kj::TimePoint last_log_ = kj::origin<kj::TimePoint>();
  bool logged_any_ = false;
  std::uint64_t unlogged_ = 0;
};

}  // namespace agentd::detail
