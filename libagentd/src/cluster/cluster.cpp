// agentd::Cluster: members, placement, and bulk creation spread over servers in parallel.
#include <agentd/cluster.h>

#include "membership.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>

namespace agentd {

struct Cluster::State {
  struct Member {
    ClusterMember info;
    cluster::Address address;
    std::shared_ptr<Client> client;  // null while down (never connected)
  };

  std::vector<std::string> specs;  // what refresh() resolves again; empty for children
  ClusterOptions options;
  mutable std::mutex mu;
  std::vector<Member> members;
  // Clients of members that left on refresh(): references handed out by server() stay valid.
  std::vector<std::shared_ptr<Client>> retired;
  std::size_t next = 0;  // round_robin cursor

  // Member i's client when up (a copy of the pointer, so no lock is held while it is used).
  std::shared_ptr<Client> up_client(std::size_t i) const {
    std::lock_guard lock(mu);
    if (i >= members.size() || !members[i].info.up) return nullptr;
    return members[i].client;
  }
  std::vector<std::size_t> up_members() const {
    std::lock_guard lock(mu);
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].info.up) out.push_back(i);
    return out;
  }
  void mark_down(std::size_t i, const Error& e) {
    std::lock_guard lock(mu);
    if (i >= members.size()) return;
    members[i].info.up = false;
    members[i].info.error = e.message();
  }
  Error none_up(const std::string& what) const {
    std::lock_guard lock(mu);
    std::string why;
    for (const auto& m : members)
      why += fmt::format("; {}: {}", m.info.address, m.info.error.empty() ? "up" : m.info.error);
    return Error::retryable(
        ErrorCode::disconnected,
        fmt::format("{}: no server of the cluster is up ({} members{})", what, members.size(), why));
  }
};

namespace {

bool is_down_error(const Error& e) { return e.code() == ErrorCode::disconnected; }

// Connects to each address in parallel; members that cannot be reached are down. A refused
// token or bad TLS settings are the caller's mistake, not a server being down: thrown.
std::vector<Cluster::State::Member> connect_all(const std::vector<cluster::Address>& addresses,
                                                ClientOptions options) {
  // A cluster fails over instead of waiting: a member whose connection goes fails its calls at
  // once, is marked down and skipped, and refresh() connects it again. A member client that
  // reconnected by itself (ClientOptions::reconnect_deadline) would hold every call placed on
  // it for up to the deadline instead.
  options.reconnect_deadline = std::chrono::milliseconds(0);
  std::vector<Cluster::State::Member> out(addresses.size());
  std::vector<std::exception_ptr> failed(addresses.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    out[i].address = addresses[i];
    out[i].info.address = addresses[i].text();
    out[i].info.source = addresses[i].source;
    threads.emplace_back([&, i] {
      try {
        out[i].client = std::make_shared<Client>(
            Client::connect(addresses[i].endpoint.host, addresses[i].endpoint.port, options));
        out[i].info.up = true;
      } catch (const Error& e) {
        if (e.code() == ErrorCode::unauthenticated || e.code() == ErrorCode::config_error)
          failed[i] = std::current_exception();
        out[i].info.error = e.message();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
  return out;
}

void merge_client_options(ClientOptions& into, const cluster::ClusterFile& file) {
  if (into.token.empty()) into.token = file.token;
  if (into.tls_ca.empty()) into.tls_ca = file.tls_ca;
  if (into.tls_cert.empty()) into.tls_cert = file.tls_cert;
  if (into.tls_key.empty()) into.tls_key = file.tls_key;
}

}  // namespace

Cluster Cluster::connect(const std::vector<std::string>& servers, ClusterOptions options) {
  if (servers.empty()) throw Error(ErrorCode::bad_args, "a cluster needs at least one server");
  auto addresses = cluster::resolve(servers);
  if (addresses.empty()) throw Error(ErrorCode::bad_args, "the cluster's members resolve to no address");
  auto s = std::make_shared<State>();
  s->specs = servers;
  s->options = std::move(options);
  s->members = connect_all(addresses, s->options.client);
  Cluster c(s);
  if (s->up_members().empty()) throw s->none_up("connect to the cluster");
  return c;
}

Cluster Cluster::from_file(const std::string& path, ClusterOptions options) {
  auto file = cluster::read_cluster_file(path);
  merge_client_options(options.client, file);
  if (file.placement && options.placement == Placement::round_robin) options.placement = *file.placement;
  return connect(file.servers, std::move(options));
}

Cluster Cluster::open(const std::string& spec, ClusterOptions options) {
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    if (auto list = cluster::split_spec_list(spec)) return connect(*list, std::move(options));
  return from_file(spec, std::move(options));
}

Cluster Cluster::spawn_children(std::size_t n, ChildOptions child, ClusterOptions options) {
  if (n == 0) throw Error(ErrorCode::bad_args, "spawn_children: n must be at least 1");
  auto s = std::make_shared<State>();
  s->options = std::move(options);
  s->members.resize(n);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::optional<Error> first;
  for (std::size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        auto c = std::make_shared<Client>(Client::spawn_child(child));
        auto& m = s->members[i];
        m.info.address = c->address();
        m.info.source = "child";
        m.info.up = true;
        m.address = {net::Endpoint::try_parse(c->address()).value_or(net::Endpoint{}), "child"};
        m.client = std::move(c);
      } catch (const Error& e) {
        std::lock_guard lock(mu);
        if (!first) first = e;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) throw *first;  // the children that started stop with s
  return Cluster(s);
}

std::size_t Cluster::size() const {
  std::lock_guard lock(s_->mu);
  return s_->members.size();
}

std::vector<ClusterMember> Cluster::members() const {
  std::lock_guard lock(s_->mu);
  std::vector<ClusterMember> out;
  for (const auto& m : s_->members) out.push_back(m.info);
  return out;
}

std::shared_ptr<Client> Cluster::server_shared(std::size_t i) {
  std::lock_guard lock(s_->mu);
  if (i >= s_->members.size())
    throw Error(ErrorCode::bad_args,
                fmt::format("cluster member {}: there are {} members", i, s_->members.size()));
  auto& m = s_->members[i];
  if (!m.info.up || !m.client)
    throw Error::retryable(ErrorCode::disconnected, fmt::format("cluster member {} ({}) is down: {}", i,
                                                                m.info.address, m.info.error));
  return m.client;
}

Client& Cluster::server(std::size_t i) { return *server_shared(i); }

std::optional<ServerInfo> Cluster::info(std::size_t i) {
  auto c = s_->up_client(i);
  if (!c) return std::nullopt;
  try {
    return c->info();
  } catch (const Error& e) {
    if (!is_down_error(e)) throw;
    s_->mark_down(i, e);
    return std::nullopt;
  }
}

std::size_t Cluster::refresh() {
  if (s_->specs.empty()) return s_->up_members().size();  // children: nothing to resolve
  auto addresses = cluster::resolve(s_->specs);
  std::vector<cluster::Address> to_connect;
  {
    std::lock_guard lock(s_->mu);
    for (const auto& a : addresses)
      if (std::none_of(s_->members.begin(), s_->members.end(),
                       [&](const State::Member& m) { return m.info.up && m.info.address == a.text(); }))
        to_connect.push_back(a);
  }
  auto fresh = connect_all(to_connect, s_->options.client);
  std::lock_guard lock(s_->mu);
  // The members now: one per address, the one up kept, else the fresh attempt.
  std::vector<State::Member> now;
  for (const auto& a : addresses) {
    auto same = [&](const State::Member& m) { return m.info.address == a.text(); };
    auto old = std::find_if(s_->members.begin(), s_->members.end(), same);
    if (old != s_->members.end() && old->info.up) {
      now.push_back(std::move(*old));
      continue;
    }
    auto f = std::find_if(fresh.begin(), fresh.end(), same);
    if (f != fresh.end()) now.push_back(std::move(*f));
  }
  for (auto& m : s_->members)
    if (m.client) s_->retired.push_back(std::move(m.client));  // left, or replaced
  s_->members = std::move(now);
  std::size_t up = 0;
  for (const auto& m : s_->members) up += m.info.up ? 1 : 0;
  return up;
}

// ---- placement ----

namespace {

// Tries create on the members in order; a member found down is marked and the next one tried.
AgentRef create_on_first(Cluster::State& s, const std::vector<std::size_t>& order,
                         const std::function<AgentRef(Client&)>& create, const std::string& what) {
  for (auto i : order) {
    auto c = s.up_client(i);
    if (!c) continue;
    try {
      return create(*c);
    } catch (const Error& e) {
      if (!is_down_error(e)) throw;
      s.mark_down(i, e);
    }
  }
  throw s.none_up(what);
}

// Agent counts of the members up, as their servers report them (a member that fails to answer
// is marked down and left out).
std::vector<std::pair<std::size_t, std::uint64_t>> loads(Cluster::State& s) {
  std::vector<std::pair<std::size_t, std::uint64_t>> out;
  for (auto i : s.up_members()) {
    auto c = s.up_client(i);
    if (!c) continue;
    try {
      out.emplace_back(i, c->info().agent_count);
    } catch (const Error& e) {
      if (!is_down_error(e)) throw;
      s.mark_down(i, e);
    }
  }
  return out;
}

// The members to try, best first, by the policy.
std::vector<std::size_t> placement_order(Cluster::State& s) {
  std::vector<std::size_t> order;
  if (s.options.placement == Placement::least_loaded) {
    auto l = loads(s);
    std::stable_sort(l.begin(), l.end(), [](auto& a, auto& b) { return a.second < b.second; });
    for (auto& [i, n] : l) order.push_back(i);
    return order;
  }
  auto up = s.up_members();
  if (up.empty()) return order;
  std::size_t start;
  {
    std::lock_guard lock(s.mu);
    start = s.next++;
  }
  // The first up member at or after the cursor, then the rest in member order.
  std::size_t n = 0;
  {
    std::lock_guard lock(s.mu);
    n = s.members.size();
  }
  for (std::size_t k = 0; k < n; ++k) {
    auto i = (start + k) % n;
    if (std::find(up.begin(), up.end(), i) != up.end()) order.push_back(i);
  }
  return order;
}

// How many of count each member gets: equal shares (round_robin, the remainder from the cursor
// on), or filling the emptiest first (least_loaded).
std::vector<std::pair<std::size_t, std::size_t>> shares(Cluster::State& s, std::size_t count) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (s.options.placement == Placement::least_loaded) {
    auto l = loads(s);
    if (l.empty()) return out;
    using Slot = std::pair<std::uint64_t, std::size_t>;  // load, position in l
    std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
    for (std::size_t k = 0; k < l.size(); ++k) heap.push({l[k].second, k});
    std::vector<std::size_t> given(l.size(), 0);
    for (std::size_t n = 0; n < count; ++n) {
      auto [load, k] = heap.top();
      heap.pop();
      ++given[k];
      heap.push({load + 1, k});
    }
    for (std::size_t k = 0; k < l.size(); ++k) out.emplace_back(l[k].first, given[k]);
    return out;
  }
  auto order = placement_order(s);
  if (order.empty()) return out;
  std::size_t base = count / order.size(), extra = count % order.size();
  for (std::size_t k = 0; k < order.size(); ++k) out.emplace_back(order[k], base + (k < extra ? 1 : 0));
  // Members in order, so a member's agents get consecutive indexes in member order.
  std::sort(out.begin(), out.end());
  {
    std::lock_guard lock(s.mu);
    s.next += count > 0 ? count - 1 : 0;  // placement_order advanced it by one already
  }
  return out;
}

}  // namespace

AgentRef Cluster::create_agent(const std::string& class_name, const std::string& name, const Value& args,
                               const std::string& id) {
  return create_on_first(
      *s_, placement_order(*s_), [&](Client& c) { return c.create_agent(class_name, name, args, id); },
      fmt::format("create {} agent", class_name));
}

AgentRef Cluster::create_agent_on(const std::string& server, const std::string& class_name,
                                  const std::string& name, const Value& args, const std::string& id) {
  std::optional<std::size_t> index;
  {
    std::lock_guard lock(s_->mu);
    for (std::size_t i = 0; i < s_->members.size(); ++i)
      if (s_->members[i].info.address == server || std::to_string(i) == server) index = i;
    if (!index) {
      std::string known;
      for (std::size_t i = 0; i < s_->members.size(); ++i)
        known += fmt::format("{}{} ({})", i ? ", " : "", i, s_->members[i].info.address);
      throw Error(ErrorCode::bad_args, fmt::format("no cluster member \"{}\" (members: {})", server, known));
    }
  }
  Client& c = this->server(*index);  // throws when down
  try {
    return c.create_agent(class_name, name, args, id);
  } catch (const Error& e) {
    if (is_down_error(e)) s_->mark_down(*index, e);
    throw;
  }
}

std::vector<AgentRef> Cluster::create_agents(const std::string& class_name, std::size_t count,
                                             const Value& args, const std::string& name_prefix) {
  std::vector<std::optional<AgentRef>> made(count);
  std::vector<std::size_t> made_on(count);  // the member that made made[k]
  // Index ranges still to make; a range whose member was found down goes round again.
  std::vector<std::pair<std::size_t, std::size_t>> todo;  // first index, count
  if (count > 0) todo.emplace_back(0, count);
  std::optional<Error> failure;
  while (!todo.empty() && !failure) {
    std::size_t pending = 0;
    for (auto& [first, n] : todo) pending += n;
    auto plan = shares(*s_, pending);
    if (plan.empty()) throw s_->none_up(fmt::format("create {} {} agents", count, class_name));
    // Hand out the pending ranges' indexes to the members in order.
    struct Job {
      std::size_t member;
      std::vector<std::pair<std::size_t, std::size_t>> ranges;
      std::optional<Error> error;
    };
    std::vector<Job> jobs;
    std::size_t r = 0, used = 0;  // position in todo, and how much of todo[r] is handed out
    for (auto& [member, share] : plan) {
      if (share == 0) continue;
      Job job{member, {}, std::nullopt};
      while (share > 0) {
        std::size_t take = std::min(share, todo[r].second - used);
        job.ranges.emplace_back(todo[r].first + used, take);
        share -= take;
        used += take;
        if (used == todo[r].second) ++r, used = 0;
      }
      jobs.push_back(std::move(job));
    }
    todo.clear();
    std::vector<std::thread> threads;
    for (auto& job : jobs)
      threads.emplace_back([&, j = &job] {
        auto c = s_->up_client(j->member);
        try {
          if (!c) throw Error::retryable(ErrorCode::disconnected, "the member went down");
          for (auto& [first, n] : j->ranges) {
            auto refs = c->create_agents(class_name, n, args, name_prefix, first);
            for (std::size_t k = 0; k < n; ++k) {
              made[first + k] = std::move(refs[k]);
              made_on[first + k] = j->member;
            }
          }
        } catch (const Error& e) {
          j->error = e;
        }
      });
    for (auto& t : threads) t.join();
    for (auto& job : jobs) {
      if (!job.error) continue;
      if (is_down_error(*job.error)) {
        s_->mark_down(job.member, *job.error);
        // What this member did not make is placed again on the others.
        for (auto& [first, n] : job.ranges)
          for (std::size_t k = first; k < first + n; ++k)
            if (!made[k]) {
              if (!todo.empty() && todo.back().first + todo.back().second == k)
                ++todo.back().second;
              else
                todo.emplace_back(k, 1);
            }
      } else if (!failure) {
        failure = job.error;
      }
    }
  }
  if (failure) {
    // All or nothing: delete what was made, per server in parallel.
    std::vector<std::thread> threads;
    std::vector<std::vector<std::string>> by_member(size());
    for (std::size_t k = 0; k < count; ++k)
      if (made[k] && made_on[k] < by_member.size()) by_member[made_on[k]].push_back(made[k]->id());
    for (std::size_t i = 0; i < by_member.size(); ++i)
      threads.emplace_back([&, i] {
        auto c = s_->up_client(i);
        if (!c) return;
        for (auto& id : by_member[i]) {
          try {
            c->delete_agent(id);
          } catch (const Error&) {
          }
        }
      });
    for (auto& t : threads) t.join();
    throw *failure;
  }
  std::vector<AgentRef> out;
  out.reserve(count);
  for (auto& m : made) out.push_back(std::move(*m));
  return out;
}

AgentRef Cluster::agent(const std::string& id) {
  for (auto i : s_->up_members()) {
    auto c = s_->up_client(i);
    if (!c) continue;
    try {
      return c->agent(id);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::unknown_agent) continue;
      if (!is_down_error(e)) throw;
      s_->mark_down(i, e);
    }
  }
  throw Error(ErrorCode::unknown_agent,
              fmt::format("no server of the cluster holds agent {} ({} of {} members up)", id,
                          s_->up_members().size(), size()),
              id);
}

std::size_t Cluster::delete_all_agents() {
  std::size_t n = 0;
  for (auto i : s_->up_members()) {
    auto c = s_->up_client(i);
    if (!c) continue;
    try {
      n += c->delete_all_agents();
    } catch (const Error& e) {
      if (!is_down_error(e)) throw;
      s_->mark_down(i, e);
    }
  }
  return n;
}

Cluster::Cluster(const Cluster&) = default;
Cluster& Cluster::operator=(const Cluster&) = default;
Cluster::Cluster(Cluster&&) noexcept = default;
Cluster& Cluster::operator=(Cluster&&) noexcept = default;
Cluster::~Cluster() = default;

}  // namespace agentd
