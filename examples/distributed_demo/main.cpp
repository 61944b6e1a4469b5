// AgentScope's distributed tutorial in agentd: N web agents, each reply takes `sleep` seconds.
// Run sequentially with agents in this process (local mode), then distributed: all replies
// issued at once as placeholders, then collected (child mode, and independent mode with --connect).
//
//   distributed_demo [--connect HOST:PORT] [--agents N] [--sleep-ms MS] [--plugin-dir DIR]
//                    [--modes local,child,independent]
#include <agentd/agentd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string connect;  // host:port of an as_server (independent mode)
  int agents = 5;
  int sleep_ms = 5000;
  std::string plugin_dir = AGENTD_DEMO_PLUGIN_DIR;
  std::vector<std::string> modes;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Creates the agents, runs one reply each, and prints init and run times.
// sequential: wait for each reply before the next (what plain local code does).
double run_mode(const std::string& label, agentd::Client client, const Options& o, bool sequential) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<agentd::AgentRef> agents;
  for (int i = 0; i < o.agents; ++i)
    agents.push_back(
        client.create_agent("WebAgent", "W" + std::to_string(i), agentd::Value{{"sleep_ms", o.sleep_ms}}));
  double init = seconds_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  std::vector<std::string> answers;
  if (sequential) {
    for (auto& a : agents) answers.push_back(a.reply(agentd::Msg("system", "page_1")).get().text());
  } else {
    std::vector<agentd::Placeholder> results;
    for (auto& a : agents) results.push_back(a.reply(agentd::Msg("system", "page_1")));
    for (auto& r : results) answers.push_back(r.get().text());
  }
  double run = seconds_since(t1);
  std::printf("%-28s init %d agents: %7.3f s   run: %7.3f s   (%s)\n", label.c_str(), o.agents, init, run,
              answers.empty() ? "" : answers.back().c_str());
  std::fflush(stdout);
  client.delete_all_agents();
  return run;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

void usage() {
  std::cout << "Usage: distributed_demo [options]\n"
               "  --connect HOST:PORT   also run against this as_server (independent mode)\n"
               "  --agents N            web agents (default 5)\n"
               "  --sleep-ms MS         how long each reply takes (default 5000)\n"
               "  --plugin-dir DIR      where libweb_agent.so is, for local and child mode\n"
               "  --modes LIST          comma-separated: local,child,independent (default: local,child,\n"
               "                        plus independent with --connect)\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "distributed_demo: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--connect")
      o.connect = next();
    else if (a == "--agents")
      o.agents = std::stoi(next());
    else if (a == "--sleep-ms")
      o.sleep_ms = std::stoi(next());
    else if (a == "--plugin-dir")
      o.plugin_dir = next();
    else if (a == "--modes")
      o.modes = split(next(), ',');
    else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      std::cerr << "distributed_demo: unknown option " << a << " (see --help)\n";
      return 2;
    }
  }
  if (o.modes.empty()) {
    o.modes = {"local", "child"};
    if (!o.connect.empty()) o.modes.push_back("independent");
  }
  std::string plugin = o.plugin_dir + "/libweb_agent.so";

  try {
    double sequential = 0, best = 0;
    for (const auto& mode : o.modes) {
      if (mode == "local") {
        sequential = run_mode("local, sequential", agentd::Client::local({.plugins = {plugin}}), o, true);
      } else if (mode == "child") {
        double t =
            run_mode("child mode, distributed", agentd::Client::spawn_child({.plugins = {plugin}}), o, false);
        best = best == 0 ? t : std::min(best, t);
      } else if (mode == "independent") {
        auto colon = o.connect.rfind(':');
        if (o.connect.empty() || colon == std::string::npos) {
          std::cerr << "distributed_demo: independent mode needs --connect HOST:PORT\n";
          return 2;
        }
        auto host = o.connect.substr(0, colon);
        auto port = static_cast<std::uint16_t>(std::stoi(o.connect.substr(colon + 1)));
        double t = run_mode("independent " + o.connect + ", distributed", agentd::Client::connect(host, port),
                            o, false);
        best = best == 0 ? t : std::min(best, t);
      } else {
        std::cerr << "distributed_demo: unknown mode '" << mode << "' (local, child, independent)\n";
        return 2;
      }
    }
    if (sequential > 0 && best > 0)
      std::printf("speed-up of distributed over sequential: %.1fx\n", sequential / best);
  } catch (const agentd::Error& e) {
    std::cerr << "distributed_demo: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
