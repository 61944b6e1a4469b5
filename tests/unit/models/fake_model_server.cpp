#include "fake_model_server.h"

#include <curl/curl.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace agentd::test {
namespace {

[[noreturn]] void die(const std::string& what) { throw std::runtime_error("fake model server: " + what); }

size_t append(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

}  // namespace

FakeModelServer::FakeModelServer() {
  // Proxies from the environment must not capture loopback test traffic.
  for (const char* v : {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
    unsetenv(v);
  }
  int out[2];
  int in[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0) die(std::strerror(errno));
  const std::string script = std::string(AGENTD_SOURCE_DIR) + "/tests/unit/models/fake_model_server.py";
  pid_ = fork();
  if (pid_ < 0) die(std::strerror(errno));
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the test process
    dup2(in[0], 0);
    dup2(out[1], 1);
    execlp("python3", "python3", "-u", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  stdin_fd_ = in[1];

  // Wait for "PORT <n>\n" on its stdout.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (line.find('\n') == std::string::npos) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) die("did not report its port within 20 s");
    pollfd p{out[0], POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) die("exited before reporting its port (is python3 installed?)");
    line.append(buf, static_cast<std::size_t>(n));
  }
  close(out[0]);
  if (line.rfind("PORT ", 0) != 0) die("unexpected first line: " + line);
  port_ = std::stoi(line.substr(5));
}

FakeModelServer::~FakeModelServer() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

std::string FakeModelServer::base(const std::string& key, const std::string& scenario) const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/s/" + key + "/" + scenario;
}

std::string FakeModelServer::openai_config(const std::string& config_name, const std::string& key,
                                           const std::string& scenario) const {
  return "- config_name: " + config_name +
         "\n"
         "  model_type: openai_chat\n"
         "  model_name: test-model\n"
         "  api_key: test-key\n"
         "  client_args:\n"
         "    base_url: " +
         base(key, scenario) +
         "/v1\n"
         "    max_retries: 0\n";
}

Value FakeModelServer::requests(const std::string& key) const { return get("/requests/" + key); }

Value FakeModelServer::stats(const std::string& key) const { return get("/stats/" + key); }

Value FakeModelServer::get(const std::string& path) const {
  CURL* curl = curl_easy_init();
  std::string body;
  std::string url = "http://127.0.0.1:" + std::to_string(port_) + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) die("GET " + path + " failed: " + curl_easy_strerror(rc));
  return Value::parse(body);
}

FakeModelServer& fake_model_server() {
  static FakeModelServer server;
  return server;
}

std::string unique_key(const std::string& prefix) {
  static std::atomic<int> next{0};
  return prefix + std::to_string(getpid()) + "x" + std::to_string(next++);
}

int closed_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    die("cannot find a closed port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace agentd::test
