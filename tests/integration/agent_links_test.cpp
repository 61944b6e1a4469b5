// Agents reaching other agents by reference (connect_agent, RelayAgent): a server's agents share
// the server's one peer connection to each other server, the same one its placeholder fetches
// use, with no connection or thread of their own; agents on the same server are reached without
// a socket at all.
#include "server_process.h"
#include "test_names.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace agentd::test;

namespace {

// The socket inodes process pid holds open.
std::set<std::string> socket_inodes(pid_t pid) {
  std::set<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char target[256];
    std::string path = dir + "/" + e->d_name;
    ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    std::string link(target, static_cast<std::size_t>(n));
    if (link.rfind("socket:[", 0) == 0) out.insert(link.substr(8, link.size() - 9));
  }
  ::closedir(d);
  return out;
}

// Established TCP connections that process pid holds to 127.0.0.1:port (as the connecting side).
int connections_to(pid_t pid, std::uint16_t port) {
  auto mine = socket_inodes(pid);
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  int count = 0;
  char want[8];
  std::snprintf(want, sizeof want, "%04X", port);
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state != "01") continue;  // ESTABLISHED
    if (remote.substr(remote.find(':') + 1) != want) continue;
    if (mine.count(inode)) ++count;
  }
  return count;
}

}  // namespace

TEST_CASE("relays on one server share its one peer connection to another, also used for fetches", "[links]") {
  auto a = ServerProcess::start(standard_args());
  auto b = ServerProcess::start(standard_args());
  Client ca = a->connect();
  Client cb = b->connect();
  AgentRef target = cb.create_agent("EchoAgent", "target", Value{{"prefix", "b:"}});
  // A placeholder made on B consumed on A: A's peer connection to B carries the fetch.
  AgentRef echo_a = ca.create_agent("EchoAgent", "echo-a");
  CHECK(echo_a.reply(target.reply(Msg("user", "fetched"))).get().text() == "b:fetched");
  // Relays on A reach the agent on B, from several threads at once.
  std::vector<AgentRef> relays;
  for (int i = 0; i < 8; ++i)
    relays.push_back(
        ca.create_agent("RelayAgent", "relay" + std::to_string(i), Value{{"target", target.to_value()}}));
  std::vector<std::thread> threads;
  std::vector<std::string> answers(relays.size());
  for (std::size_t i = 0; i < relays.size(); ++i)
    threads.emplace_back([&, i] { answers[i] = relays[i].reply(Msg("user", "x")).get().text(); });
  for (auto& t : threads) t.join();
  for (const auto& answer : answers) CHECK(answer == "relayed: b:x");
  // One connection from A to B for all of it.
  CHECK(connections_to(a->pid(), b->port()) == 1);
}

TEST_CASE("a relay to an agent on its own server reaches it without a socket", "[links]") {
  auto a = ServerProcess::start(standard_args());
  Client c = a->connect();
  AgentRef target = c.create_agent("EchoAgent", "target", Value{{"prefix", "here:"}});
  AgentRef relay = c.create_agent("RelayAgent", "relay", Value{{"target", target.to_value()}});
  CHECK(relay.reply(Msg("user", "x")).get().text() == "relayed: here:x");
  CHECK(relay.reply(Msg("user", "y")).get().text() == "relayed: here:y");
  CHECK(connections_to(a->pid(), a->port()) == 0);  // the server never connected to itself
  // The target remembers both calls, in order, as a direct caller would have left them.
  auto memory = target.memory();
  REQUIRE(memory.size() == 4);
  CHECK(memory[0].text() == "x");
  CHECK(memory[2].text() == "y");
}

TEST_CASE("a relay whose target's server is gone fails with a retryable error, the server lives", "[links]") {
  auto a = ServerProcess::start(standard_args());
  auto b = ServerProcess::start(standard_args());
  Client ca = a->connect();
  AgentRef target = b->connect().create_agent("EchoAgent", "target");
  AgentRef relay = ca.create_agent("RelayAgent", "relay", Value{{"target", target.to_value()}});
  CHECK(relay.reply(Msg("user", "1")).get().text() == "relayed: 1");
  b->kill_now();
  Error e = [&] {
    try {
      relay.reply(Msg("user", "2")).get(std::chrono::seconds(60));
    } catch (const Error& err) {
      return err;
    }
    FAIL("expected the relay to fail");
    return Error(ErrorCode::internal, "unreachable");
  }();
  // The relay's code threw the link's error; it reaches the caller as it was, retryable.
  CHECK(e.code() == ErrorCode::disconnected);
  CHECK(e.retryable());
  CHECK(e.agent_id() == relay.id());
  CHECK(ca.info().agent_count == 1);  // server A carries on, relay and all
}
