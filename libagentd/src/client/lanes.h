// A client's synchronous lanes (ClientOptions::lanes; README "The synchronous lane"): each user
// thread gets a lane of its own to the server (net/lane_client.h), and a reply whose result that
// thread waits for at once travels on it, written and read on the thread itself, with no hand-off
// to the loop thread and back (and, on the server, none to a worker and back).
//
// A reply() cannot know whether get() follows at once, so a reply that may take a lane is held
// back (a DeferredReply; at most one per thread, of all its clients) and goes
//  - on the thread's lane, when the thread's next step with the client is get() on it;
//  - on the RPC connection, as any call, as soon as anything else happens first: the thread posts
//    anything else to any client (ClientCore::post() releases it first, so it keeps its place),
//    the placeholder is used otherwise (passed as input, awaited, watched, read from another
//    thread, dropped), or kHoldLimit passes (the loop thread's sweep), so a program that computes
//    between reply() and get() starts its call within about a millisecond.
// An agent's calls from one thread keep their order across the two ways: a lane carries a call
// only while none of the thread's calls sent on the RPC connection is unfinished, and a lane's
// call is finished when get() returns.
#pragma once

#include "call_batch.h"
#include "lane_client.h"
#include "result_slot.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace agentd::detail {

class ClientCore;

// One thread's lane to its client's server.
struct ThreadLane {
  std::mutex mu;  // held while the lane carries a call
  // Empty: not open (yet, or after a failure). Used under mu; set only by set_client(), which
  // also holds fd_mu: so LaneSet::close() may shut client's socket from any thread under fd_mu
  // alone (client->fd() is fixed while it is open, and a number reused after it is closed is
  // never shut).
  std::optional<LaneClient> client;
  std::chrono::steady_clock::time_point retry_after{};  // guarded by mu: no new lane before
  std::mutex fd_mu;

  // Sets (or, with nullopt, closes) the lane's connection. Holding mu.
  void set_client(std::optional<LaneClient> c) {
    std::lock_guard lock(fd_mu);
    client = std::move(c);
  }
  std::atomic<bool> closed{false};  // the client closed: no lane any more
  // This thread's calls sent on the RPC connection and not finished: while there are any, its
  // replies go there too (a lane's call could overtake them on their agent).
  std::atomic<int> rpc_unfinished{0};
};

// A reply held back by the thread that made it (see above).
struct DeferredReply {
  enum : int { kHeld, kLane, kRpc };
  std::atomic<int> state{kHeld};
  std::thread::id thread = std::this_thread::get_id();
  std::shared_ptr<ThreadLane> lane;  // the making thread's
  std::weak_ptr<ClientCore> core;    // whose lanes (LaneSet) hold it
  OutSpec spec;                      // the claimer's once claimed
  std::shared_ptr<ResultSlot> slot;
  std::chrono::steady_clock::time_point made = std::chrono::steady_clock::now();
};

class LaneSet {
 public:
  // A reply is held at most this long before it goes on the RPC connection.
  static constexpr std::chrono::microseconds kHoldLimit{1000};

  // host:port (or "unix:PATH") with token: where the lanes go. core is borrowed (it owns this).
  LaneSet(ClientCore& core, std::string host, std::uint16_t port, std::string token);
  ~LaneSet();
  LaneSet(const LaneSet&) = delete;
  LaneSet& operator=(const LaneSet&) = delete;

  // Whether spec may travel on a lane: a reply with a message input (no placeholder input, not
  // streamed, no trace id) of a size a lane carries cheaply.
  static bool eligible(const OutSpec& spec);
  // A user thread's eligible reply, held back; the thread's reply held before (on this client) is
  // sent first. slot is where its result lands.
  // core is this set's own (kept by the reply, which the thread's next post may release).
  std::shared_ptr<DeferredReply> hold(OutSpec spec, const std::shared_ptr<ResultSlot>& slot,
                                      const std::shared_ptr<ClientCore>& core);
  // get() (with timeout) on r: on the thread that made it, still held, it runs on the thread's
  // lane now (or goes on the RPC connection when the lane cannot take it); else it is released.
  // Either way r's slot settles as it would have.
  void get(DeferredReply& r, std::chrono::milliseconds timeout);
  // Any user thread: r on the RPC connection, unless it was claimed already.
  void release(DeferredReply& r);
  // A call sent on the RPC connection from this thread (its result lands in slot): until it is
  // finished, this thread's replies avoid the lane.
  void note_rpc(const std::shared_ptr<ResultSlot>& slot);
  // Loop thread: sends the replies held past kHoldLimit on the RPC connection.
  void sweep();
  // The client is closing: every lane is shut, held replies go on the RPC connection (which fails
  // them as closed). Any user thread.
  void close();

 private:
  std::shared_ptr<ThreadLane> this_thread_lane();
  // r, claimed (state kRpc), on the RPC connection: from a user thread through post(), from the
  // loop thread directly.
  void send_rpc(DeferredReply& r, bool on_loop);
  // r, claimed (kLane) on its thread: the lane call; false when the lane could not take it.
  bool try_lane(DeferredReply& r, std::chrono::milliseconds timeout);
  void arm_sweep();

  ClientCore& core_;
  const std::string host_;
  const std::uint16_t port_;
  const std::string token_;
  std::mutex mu_;
  std::unordered_map<std::thread::id, std::shared_ptr<ThreadLane>> lanes_;  // guarded by mu_
  std::vector<std::weak_ptr<DeferredReply>> held_;                          // guarded by mu_
  bool sweep_armed_ = false;                                                // guarded by mu_
  bool closed_ = false;                                                     // guarded by mu_
  std::atomic<bool> warned_{false};                                         // a lane refusal was logged
};

}  // namespace agentd::detail
