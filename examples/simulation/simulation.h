// The main-process side of the guess-2/3-of-the-average simulation, shared by the `simulation`
// program and agentd-bench's W8: placing participants and groups on servers, and playing rounds
// through placeholders (main -> groups -> participants). Header-only, on the public API only.
//
// Placement: every server gets an equal share of the participants and `groups_per_server`
// groups that hold them, so a group's calls to its participants never leave its server. A round
// is two fan-outs: the main program calls "guess" on every group at once, each group calls every
// participant at once; the main computes 2/3 of the average, then asks each group for its closest
// participant ("closest", answered from the guesses the group kept) and picks the winner.
//
// Thread-safety: a Game is used from one thread; it makes threads of its own to work on the
// servers in parallel while setting up.
#pragma once

#include <agentd/client.h>
#include <agentd/cluster.h>
#include <agentd/error.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace simulation {

struct GameOptions {
  std::size_t participants = 1000;
  std::size_t groups_per_server = 0;  // 0: auto_groups()
  int latency_ms = 1000;              // each participant's simulated model latency
  std::int64_t seed = 0;
  std::string model;   // non-empty: participants ask this model config
  std::string prompt;  // with model: the question (empty: the participants' default)
};

// Participants per group the automatic choice aims at (measured: see the README's simulation
// section).
inline constexpr std::size_t kParticipantsPerGroup = 5000;

// Groups for `per_server` participants on one server: one per kParticipantsPerGroup (at least 1).
inline std::size_t auto_groups(std::size_t per_server) {
  return std::max<std::size_t>(1, (per_server + kParticipantsPerGroup - 1) / kParticipantsPerGroup);
}

struct ServerAgents {
  std::vector<agentd::AgentRef> participants;
  std::vector<agentd::AgentRef> groups;
  std::vector<std::size_t> group_sizes;  // participants of each group (a contiguous slice)
};

struct RoundResult {
  std::int64_t round = 0;
  std::int64_t sum = 0;
  std::int64_t count = 0;
  double average = 0;
  double target = 0;   // 2/3 of the average
  std::string winner;  // the winner's name
  int winner_guess = -1;
  std::string winner_group;
  double guess_seconds = 0;    // first phase: every group's "guess" answered
  double closest_seconds = 0;  // second phase: every group's "closest" answered
  double seconds = 0;          // the whole round
};

// Runs fn(i) for every i in [0, n) on its own thread; rethrows the first failure.
inline void on_each(std::size_t n, const std::function<void(std::size_t)>& fn) {
  std::exception_ptr failure;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failure) failure = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

class Game {
 public:
  // servers are borrowed and outlive the Game (Client::spawn_child / Client::connect): each
  // server's participants are made there with Client::create_agents, all servers in parallel.
  Game(std::vector<agentd::Client*> servers, GameOptions options)
      : servers_(std::move(servers)), o_(std::move(options)), placed_(servers_.size()) {
    check();
  }
  // The servers of a cluster (borrowed, outlives the Game), those up now: the participants are
  // made with Cluster::create_agents (equal shares, in parallel), the groups on each server with
  // Cluster::create_agent_on.
  Game(agentd::Cluster& cluster, GameOptions options) : cluster_(&cluster), o_(std::move(options)) {
    const auto members = cluster.members();
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].up) {
        servers_.push_back(&cluster.server(i));
        member_index_.push_back(i);
      }
    placed_.resize(servers_.size());
    check();
  }

  const GameOptions& options() const { return o_; }
  std::size_t servers() const { return servers_.size(); }
  const std::vector<ServerAgents>& placement() const { return placed_; }
  std::size_t participants_on(std::size_t server) const {
    const std::size_t m = servers_.size();
    return o_.participants / m + (server < o_.participants % m ? 1 : 0);
  }
  std::size_t groups_on(std::size_t server) const {
    const std::size_t n = participants_on(server);
    if (n == 0) return 0;
    return std::min(n, o_.groups_per_server ? o_.groups_per_server : auto_groups(n));
  }
  // The most participants one group may hold: its args (every participant's reference, about
  // 470 bytes each on the wire) must fit one message (64 MiB).
  static constexpr std::size_t kMaxGroupSize = 100000;
  std::size_t group_count() const {
    std::size_t g = 0;
    for (const auto& s : placed_) g += s.groups.size();
    return g;
  }

  // Only what differs from the participants' defaults: every participant keeps its own copy of
  // its args, and each key costs about 100 bytes of a server's memory per participant.
  agentd::Value participant_args() const {
    agentd::Value a = agentd::Value::object();
    if (o_.latency_ms != 1000) a["latency_ms"] = o_.latency_ms;
    if (o_.seed != 0) a["seed"] = o_.seed;
    if (!o_.model.empty()) a["model"] = o_.model;
    if (!o_.prompt.empty()) a["prompt"] = o_.prompt;
    return a;
  }

  // Creates the participants, an equal share on every server, all servers in parallel (a few
  // messages per server). Names: "p<index>", 0 .. participants - 1 over all servers.
  void create_participants() {
    const agentd::Value args = participant_args();
    if (cluster_ != nullptr) {
      auto all = cluster_->create_agents("ParticipantAgent", o_.participants, args, "p");
      // Which server each landed on, by its reference's address.
      std::map<std::string, std::size_t> by_address;
      for (std::size_t i = 0; i < servers_.size(); ++i) by_address[servers_[i]->address()] = i;
      for (auto& p : all) {
        const agentd::Value ref = p.to_value();
        const std::string address = ref.begin()->at("address").get<std::string>();
        auto it = by_address.find(address);
        if (it == by_address.end())
          throw agentd::Error(agentd::ErrorCode::internal,
                              "participant " + p.name() + " is on an unknown server " + address);
        placed_[it->second].participants.push_back(std::move(p));
      }
      return;
    }
    on_each(servers_.size(), [&](std::size_t i) {
      std::size_t first = 0;
      for (std::size_t k = 0; k < i; ++k) first += participants_on(k);
      placed_[i].participants =
          servers_[i]->create_agents("ParticipantAgent", participants_on(i), args, "p", first);
    });
  }

  // Creates the groups on each server, each holding a contiguous slice of that server's
  // participants, and has them connect to their participants. Names: "s<server>-g<index>".
  void create_groups() {
    on_each(servers_.size(), [&](std::size_t i) {
      ServerAgents& s = placed_[i];
      const std::size_t n = s.participants.size();
      const std::size_t g =
          n == 0 ? 0 : std::min(n, o_.groups_per_server ? o_.groups_per_server : auto_groups(n));

      std::vector<agentd::Placeholder> connected;
      for (std::size_t k = 0, from = 0; k < g; ++k) {
        const std::size_t size = n / g + (k < n % g ? 1 : 0);
        agentd::Value list = agentd::Value::array();
        for (std::size_t j = from; j < from + size; ++j) list.push_back(s.participants[j].to_value());
        agentd::Value args = agentd::Value::object();
        args["participants"] = std::move(list);
        const std::string name = "s" + std::to_string(i) + "-g" + std::to_string(k);
        if (cluster_ != nullptr)
          s.groups.push_back(
              cluster_->create_agent_on(std::to_string(member_index_[i]), "GroupAgent", name, args));
        else
          s.groups.push_back(servers_[i]->create_agent("GroupAgent", name, args));
        s.group_sizes.push_back(size);
        connected.push_back(s.groups.back().call_async("connect"));
        from += size;
      }
      for (std::size_t k = 0; k < g; ++k)
        if (connected[k].get().content.get<std::size_t>() != s.group_sizes[k])
          throw agentd::Error(agentd::ErrorCode::internal,
                              "group " + s.groups[k].name() + " connected to a wrong count");
    });
  }

  // One round: every group's "guess" at once, 2/3 of the average, every group's "closest" at
  // once, the winner (ties: the first group in server and group order).
  RoundResult play_round(std::int64_t round) {
    using Clock = std::chrono::steady_clock;
    RoundResult r;
    r.round = round;
    const auto t0 = Clock::now();
    agentd::Value guess_args = agentd::Value::object();
    guess_args["round"] = round;
    std::vector<agentd::Placeholder> sums;
    for (const auto& s : placed_)
      for (const auto& g : s.groups) sums.push_back(g.call_async("guess", guess_args));
    for (auto& p : sums) {
      const agentd::Value v = p.get().content;
      r.sum += v.at("sum").get<std::int64_t>();
      r.count += v.at("count").get<std::int64_t>();
    }
    const auto t1 = Clock::now();
    r.average = r.count ? static_cast<double>(r.sum) / static_cast<double>(r.count) : 0.0;
    r.target = r.average * 2.0 / 3.0;
    agentd::Value closest_args = agentd::Value::object();
    closest_args["target"] = r.target;
    std::vector<agentd::Placeholder> bests;
    std::vector<const agentd::AgentRef*> asked;
    for (const auto& s : placed_)
      for (const auto& g : s.groups) {
        bests.push_back(g.call_async("closest", closest_args));
        asked.push_back(&g);
      }
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < bests.size(); ++k) {
      const agentd::Value v = bests[k].get().content;
      if (v.is_null()) continue;
      const double d = v.at("distance").get<double>();
      if (d < best) {
        best = d;
        r.winner = v.at("name").get<std::string>();
        r.winner_guess = v.at("guess").get<int>();
        r.winner_group = asked[k]->name();
      }
    }
    const auto t2 = Clock::now();
    r.guess_seconds = std::chrono::duration<double>(t1 - t0).count();
    r.closest_seconds = std::chrono::duration<double>(t2 - t1).count();
    r.seconds = std::chrono::duration<double>(t2 - t0).count();
    return r;
  }

 private:
  void check() const {
    if (servers_.empty()) throw agentd::Error(agentd::ErrorCode::bad_args, "no servers up");
    const std::size_t n = participants_on(0), g = groups_on(0);
    if (g > 0 && (n + g - 1) / g > kMaxGroupSize)
      throw agentd::Error(agentd::ErrorCode::bad_args,
                          std::to_string(n) + " participants on a server need at least " +
                              std::to_string((n + kMaxGroupSize - 1) / kMaxGroupSize) +
                              " groups there (a group holds at most " + std::to_string(kMaxGroupSize) + ")");
  }

  agentd::Cluster* cluster_ = nullptr;     // borrowed; null: plain clients
  std::vector<agentd::Client*> servers_;   // borrowed
  std::vector<std::size_t> member_index_;  // with a cluster: servers_[i] is member_index_[i]
  GameOptions o_;
  std::vector<ServerAgents> placed_;
};

}  // namespace simulation
