#include "agentctl_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace agentd::test {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ExitResult run_agentctl(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds timeout) {
  TempDir tmp;
  auto out_path = tmp.path() + "/out", err_path = tmp.path() + "/err";
  std::vector<std::string> argv_s{agentctl_path()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto name = kv.substr(0, kv.find('='));
    // The tests say where the server is; the developer's own defaults must not leak in.
    if (env.count(name) || name == "AGENTD_HOST" || name == "AGENTD_PORT") continue;
    env_s.push_back(kv);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv_s[0].c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot run " + argv_s[0] + ": " + std::strerror(rc));

  int status = 0;
  bool exited = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    throw std::runtime_error("agentctl " + shell_line(args) + " did not finish in time");
  }
  ExitResult r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

std::string shell_line(const std::vector<std::string>& args) {
  std::string out = "agentctl";
  for (const auto& a : args) {
    bool plain = !a.empty() && a.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789-_./:=@") == std::string::npos;
    out += " " + (plain ? a : "'" + a + "'");
  }
  return out;
}

std::string normalise(std::string text,
                      const std::vector<std::pair<std::string, std::string>>& exact) {
  for (const auto& [from, to] : exact) {
    if (from.empty()) continue;
    for (std::size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size())
      text.replace(pos, from.size(), to);
  }
  static const std::regex id("[0-9a-f]{32}");
  static const std::regex time("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}");
  static const std::regex ms("[0-9]+\\.[0-9]+ ms");
  text = std::regex_replace(text, id, "<ID>");
  text = std::regex_replace(text, time, "<TIME>");
  text = std::regex_replace(text, ms, "<N> ms");
  return text;
}

std::string check_golden(const std::string& name, const std::string& actual) {
  std::string golden = std::string(AGENTD_GOLDEN_DIR) + "/" + name;
  if (const char* u = std::getenv("AGENTD_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(golden, std::ios::binary) << actual;
    return {};
  }
  std::string expected = slurp(golden);
  if (expected == actual) return {};
  std::string actual_path = std::string(AGENTD_BINARY_DIR) + "/" + name + ".actual";
  std::ofstream(actual_path, std::ios::binary) << actual;
  return "output differs from " + golden + "\n  see: diff -u " + golden + " " + actual_path +
         "\n  (if the change is intended: AGENTD_UPDATE_GOLDEN=1 ctest -R agentctl, then review "
         "the diff)";
}

}  // namespace agentd::test
