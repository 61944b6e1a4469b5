#include "lanes.h"

#include "call_done.h"
#include "client_core.h"
#include "placeholder.h"

#include <sys/socket.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace agentd::detail {

namespace {

// The calling thread's held reply (t_lane_held, client_core.h, says whether there is one).
thread_local std::weak_ptr<DeferredReply> t_held;

// The lanes this thread made (of any client): closed when it exits, so that a program whose
// threads come and go does not keep a server's lane threads.
struct MadeLanes {
  std::vector<std::weak_ptr<ThreadLane>> lanes;
  ~MadeLanes() {
    for (auto& w : lanes) {
      auto lane = w.lock();
      if (!lane) continue;
      std::lock_guard lock(lane->mu);
      lane->closed.store(true);
      lane->set_client(std::nullopt);
    }
  }
};
thread_local MadeLanes t_made_lanes;

// A lane refused or lost is not tried again for this long (the RPC connection serves meanwhile).
constexpr std::chrono::seconds kRetryLane{5};

// Replies bigger than this go on the RPC connection: a lane saves microseconds, which a big
// message's copies outweigh.
constexpr std::size_t kLaneBytes = 64 * 1024;

void settle(ResultSlot& slot, Outcome o) {
  {
    std::lock_guard lock(slot.mu);
    slot.usage = o.usage;
  }
  if (auto* e = std::get_if<Error>(&o))
    slot.fail(std::move(*e));
  else
    slot.set(std::move(std::get<Msg>(o)));
}

// Counts one unfinished RPC call of a thread for as long as it lives: a slot's watcher holds it,
// so the count drops when the result comes, or when the slot goes without one (a placeholder
// dropped whose result was never to come back).
struct Unfinished {
  explicit Unfinished(std::shared_ptr<ThreadLane> l) : lane(std::move(l)) {
    lane->rpc_unfinished.fetch_add(1);
  }
  ~Unfinished() { lane->rpc_unfinished.fetch_sub(1); }
  Unfinished(const Unfinished&) = delete;
  Unfinished& operator=(const Unfinished&) = delete;
  std::shared_ptr<ThreadLane> lane;
};

void count_unfinished(const std::shared_ptr<ThreadLane>& lane, ResultSlot& slot) {
  auto mark = std::make_shared<Unfinished>(lane);
  slot.watch([mark] {});  // 0 (settled already): the lambda, and mark, are dropped at once
}

}  // namespace

LaneSet::LaneSet(ClientCore& core, std::string host, std::uint16_t port, std::string token)
    : core_(core), host_(std::move(host)), port_(port), token_(std::move(token)) {}

LaneSet::~LaneSet() { close(); }

bool LaneSet::eligible(const OutSpec& spec) {
  return spec.kind == wire::CallKind::REPLY && spec.msg && !spec.ref && !spec.stream &&
         spec.trace_id.empty() && spec_size(spec) <= kLaneBytes;
}

std::shared_ptr<ThreadLane> LaneSet::this_thread_lane() {
  std::lock_guard lock(mu_);
  auto& lane = lanes_[std::this_thread::get_id()];
  if (!lane || lane->closed.load()) {
    lane = std::make_shared<ThreadLane>();
    if (closed_) lane->closed = true;
    t_made_lanes.lanes.push_back(lane);
  }
  return lane;
}

void release_held_reply() {
  t_lane_held = false;
  auto r = t_held.lock();
  t_held.reset();
  if (!r) return;
  if (auto core = r->core.lock(); core && core->lanes() != nullptr) core->lanes()->release(*r);
}

std::shared_ptr<DeferredReply> LaneSet::hold(OutSpec spec, const std::shared_ptr<ResultSlot>& slot,
                                             const std::shared_ptr<ClientCore>& core) {
  release_held_reply();
  auto r = std::make_shared<DeferredReply>();
  r->lane = this_thread_lane();
  r->core = core;
  r->spec = std::move(spec);
  r->slot = slot;
  {
    std::lock_guard lock(mu_);
    held_.push_back(r);
  }
  arm_sweep();
  t_held = r;
  t_lane_held = true;
  return r;
}

void LaneSet::release(DeferredReply& r) {
  int held = DeferredReply::kHeld;
  if (!r.state.compare_exchange_strong(held, DeferredReply::kRpc)) return;
  send_rpc(r, false);
}

void LaneSet::note_rpc(const std::shared_ptr<ResultSlot>& slot) {
  count_unfinished(this_thread_lane(), *slot);
}

void LaneSet::send_rpc(DeferredReply& r, bool on_loop) {
  // The thread that made it waits for its result before its replies take the lane again.
  count_unfinished(r.lane, *r.slot);
  if (on_loop) {
    Ticket t;
    t.slot = r.slot;
    t.call_id = r.spec.call_id;
    send_spec(core_.loop(), std::move(r.spec), std::move(t));
  } else {
    const std::string agent = r.spec.agent_id;
    send_async_slot(core_, std::move(r.spec), r.slot, agent);
  }
}

void LaneSet::get(DeferredReply& r, std::chrono::milliseconds timeout) {
  if (r.state.load() != DeferredReply::kHeld) return;
  // get(0) (or less) asks whether the result is there, without waiting: the call goes on the
  // connection, as it would have without a lane, rather than block this thread on it.
  if (r.thread != std::this_thread::get_id() || timeout.count() <= 0) {
    release(r);
    return;
  }
  int held = DeferredReply::kHeld;
  if (!r.state.compare_exchange_strong(held, DeferredReply::kLane)) return;
  // r was this thread's held reply (a thread holds one at a time: hold() releases the one before).
  t_lane_held = false;
  t_held.reset();
  if (try_lane(r, timeout)) return;
  r.state.store(DeferredReply::kRpc);
  send_rpc(r, false);
}

bool LaneSet::try_lane(DeferredReply& r, std::chrono::milliseconds timeout) {
  ThreadLane& lane = *r.lane;
  std::unique_lock lock(lane.mu);
  if (lane.closed.load() || lane.rpc_unfinished.load() > 0) return false;
  const auto now = std::chrono::steady_clock::now();
  if (lane.client && !lane.client->usable(now)) {
    // Idle long enough that the server may be closing it (--lane-idle-timeout), or closed by
    // the server (a restart): a new one, at once.
    lane.set_client(std::nullopt);
  }
  if (!lane.client) {
    if (now < lane.retry_after) return false;
    try {
      lane.set_client(LaneClient::connect(host_, port_, token_, core_.options().connect_timeout));
      lane.client->set_spin(core_.options().lane_spin);
    } catch (const Error& e) {
      // Not served (--lane-threads 0), all taken, or refused: the RPC connection serves.
      lane.retry_after = now + kRetryLane;
      if (!warned_.exchange(true))
        spdlog::debug("no lane to as_server at {} ({}); replies use the RPC connection", core_.address(),
                      e.message());
      return false;
    }
    if (lane.closed.load()) {  // close() ran while it opened
      lane.set_client(std::nullopt);
      return false;
    }
  }
  const auto sent = std::chrono::steady_clock::now();
  try {
    settle(*r.slot, lane.client->reply(r.spec.agent_id, r.spec.call_id, &*r.spec.msg,
                                       std::chrono::milliseconds(r.spec.timeout_ms), timeout));
    return true;
  } catch (const Error& e) {
    lane.set_client(std::nullopt);
    if (lane.closed.load()) {  // close() shut it: the call fails as the connection's do
      r.state.store(DeferredReply::kRpc);
      r.slot->fail(ClientCore::closed_error("call to agent '" + r.spec.agent_id + "'"));
      return true;
    }
    // The lane broke (or the answer was not there within timeout) after the call was written:
    // it may have run. Its result is looked up by call id on the RPC connection, as a call lost
    // with a connection is (it waits while the call is still running there).
    lane.retry_after = std::chrono::steady_clock::now() + kRetryLane;
    spdlog::debug("the lane to as_server at {} broke ({}); call {} is looked up on the RPC connection",
                  core_.address(), e.message(), r.spec.call_id);
  }
  r.state.store(DeferredReply::kRpc);
  count_unfinished(r.lane, *r.slot);
  Ticket t;
  t.slot = r.slot;
  t.call_id = r.spec.call_id;
  t.sent = sent;
  if (!core_.post_unordered([c = &core_, t = std::move(t)]() mutable {
        t.server_epoch = c->loop().server_epoch;
        look_up_lost(c->loop(), std::move(t));
      }))
    r.slot->fail(ClientCore::closed_error("call to agent '" + r.spec.agent_id + "'"));
  return true;
}

void LaneSet::arm_sweep() {
  {
    std::lock_guard lock(mu_);
    if (sweep_armed_ || closed_) return;
    sweep_armed_ = true;
  }
  core_.post_unordered([this]() {
    LoopState& loop = core_.loop();
    loop.tasks.add(loop.io.provider->getTimer()
                       .afterDelay(std::chrono::duration_cast<std::chrono::nanoseconds>(kHoldLimit).count() *
                                   kj::NANOSECONDS)
                       .then([this]() { sweep(); }));
  });
}

void LaneSet::sweep() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<DeferredReply>> due;
  bool again = false;
  {
    std::lock_guard lock(mu_);
    sweep_armed_ = false;
    std::vector<std::weak_ptr<DeferredReply>> keep;
    for (auto& w : held_) {
      auto r = w.lock();
      if (!r || r->state.load() != DeferredReply::kHeld) continue;
      if (now - r->made >= kHoldLimit)
        due.push_back(std::move(r));
      else
        keep.push_back(std::move(w));
    }
    held_ = std::move(keep);
    again = !held_.empty();
  }
  for (auto& r : due) {
    int held = DeferredReply::kHeld;
    if (r->state.compare_exchange_strong(held, DeferredReply::kRpc)) send_rpc(*r, true);
  }
  if (again) arm_sweep();
}

void LaneSet::close() {
  std::vector<std::shared_ptr<ThreadLane>> lanes;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& [id, lane] : lanes_) lanes.push_back(lane);
  }
  for (auto& lane : lanes) {
    lane->closed.store(true);
    std::lock_guard lock(lane->fd_mu);
    if (lane->client)
      ::shutdown(lane->client->fd(), SHUT_RDWR);  // a call on it fails now; its thread closes it
  }
}

}  // namespace agentd::detail
