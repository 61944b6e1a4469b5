#include "agentctl_runner.h"

#include "subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace agentd::test {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ExitResult run_agentctl(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds timeout) {
  TempDir tmp;
  auto out_path = tmp.path() + "/out", err_path = tmp.path() + "/err";
  detail::SpawnOptions options;
  options.argv = {agentctl_path()};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  std::vector<std::string> env_s = detail::current_environment();
  std::erase_if(env_s, [&](const std::string& kv) {
    auto name = kv.substr(0, kv.find('='));
    // The tests say where the server is; the developer's own defaults must not leak in.
    return env.count(name) || name == "AGENTD_HOST" || name == "AGENTD_PORT";
  });
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  options.env = std::move(env_s);
  options.in = detail::Redirect::null();
  options.out = detail::Redirect::append_to(out_path);  // out and err: new files in tmp
  options.err = detail::Redirect::append_to(err_path);
  auto process = detail::Subprocess::spawn(options);  // throws SpawnError naming agentctl

  auto status = process.wait_for(timeout);
  if (!status) {
    process.signal(SIGKILL);
    process.wait();
    throw std::runtime_error("agentctl " + shell_line(args) + " did not finish in time");
  }
  ExitResult r;
  if (WIFEXITED(*status)) r.exit_code = WEXITSTATUS(*status);
  if (WIFSIGNALED(*status)) r.term_signal = WTERMSIG(*status);
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

std::string normalise(std::string text, const std::vector<std::pair<std::string, std::string>>& exact) {
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
