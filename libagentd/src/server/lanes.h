// Lanes: the server's side of the synchronous lane (schemas/agentd.capnp, LaneHello; README "The
// synchronous lane"). A lane is one plaintext connection of one caller, carrying one call at a
// time in Cap'n Proto's stream framing, with no RPC system. The accept path (net/accept.h) hands
// its socket over once it has read its magic; a thread of its own then reads it: the hello (the
// token checked on the loop thread, by the same check as Gate.login), then each call, which it
// queues with AgentHost::run_here(), so a blocking agent's call that can start at once runs on
// this thread and is answered from it with no hand-off (with --state-dir, after its commit).
//
// This is the one place besides the loop thread that reads a client's socket, and besides the
// workers where blocking agent code runs: the README's "Inside as_server" names it as the
// exception to those two rules.
#pragma once

#include "agent_host.h"
#include "tokens.h"

#include "agentd.capnp.h"

#include <agentd/error.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace agentd::detail {

class Lanes {
 public:
  // A hello's token, checked: the digest it logged in with, or the error to refuse it with.
  // Called on a lane's thread; runs the check where the server's gate state lives (the loop).
  using CheckLogin =
      std::function<std::variant<TokenSet::Digest, Error>(const std::string& token, const std::string& peer)>;
  struct Options {
    std::size_t max_lanes = 0;                   // --lane-threads
    std::chrono::milliseconds hello_timeout{0};  // --login-timeout: the hello must come by then
    std::chrono::milliseconds idle_timeout{0};   // --lane-idle-timeout: a lane with no call closes
    std::size_t max_message_bytes = 0;           // --max-message-bytes: a bigger call closes the lane
    std::string server_id;                       // told in the welcome
    std::chrono::microseconds spin{0};           // --lane-spin: poll this long for the next call
  };
  // host is borrowed and outlives this (stop() first).
  Lanes(AgentHost& host, Options options, CheckLogin check);
  ~Lanes();  // stop()
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;

  // Loop thread: serves fd (a blocking socket, now this object's) on a thread of its own; at
  // max_lanes (or stopping) it is refused with overloaded at once and closed. tls_expected: a
  // TCP lane to a server that serves TLS only, refused saying so.
  void adopt(int fd, std::string peer, bool tls_expected);
  // Closes the lanes logged in with a token keep() no longer accepts (a token reload); their
  // calls running now finish first. Returns how many.
  std::size_t close_unless(const std::function<bool(const TokenSet::Digest&)>& keep);
  // Closes every lane and joins their threads (a call running on one finishes first).
  // Idempotent; not from a lane's thread.
  void stop();
  std::size_t open() const;            // lanes being served now
  std::uint64_t calls() const;         // calls answered on lanes since start
  std::uint64_t refused_busy() const;  // lanes refused at max_lanes

 private:
  struct Lane {
    int fd = -1;
    std::string peer;
    bool tls_expected = false;
    std::optional<TokenSet::Digest> token;  // guarded by mu_: once logged in
    bool done = false;                      // guarded by mu_: its thread has returned
    std::thread thread;
  };
  void serve(Lane& lane);
  // Runs one call read from lane and writes its answer back (a write that fails throws).
  void answer_one(const Lane& lane, wire::LaneCall::Reader call);
  // The outcome of one call read from a lane (refused before queueing, or what it produced).
  OutcomePtr run_call(wire::LaneCall::Reader call, EarlyAnswer& early);
  void reap_locked(std::vector<std::thread>& out);

  AgentHost& host_;
  const Options options_;
  CheckLogin check_;
  mutable std::mutex mu_;
  std::list<Lane> lanes_;  // guarded by mu_ (a lane's own thread reads its fd and peer freely)
  bool stopping_ = false;  // guarded by mu_
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> refused_busy_{0};
};

}  // namespace agentd::detail
