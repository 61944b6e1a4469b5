// A local model endpoint for benchmarks: OpenAI-compatible POST /v1/chat/completions (a JSON
// answer, or SSE chunks when the request asks to stream) sent after a fixed delay on the loop's
// timer, so thousands of waiting requests cost one thread and a socket each. The answer is
// "echo: <last message>" with word counts as usage. Anything else gets 404.
//
// `agentd-bench --serve-model PORT [--model-delay-ms MS]` runs it standalone; `--model-calls N`
// measures N concurrent chat_async calls against it (model_calls_bench()).
#pragma once

#include <kj/async-io.h>
#include <kj/compat/http.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace agentd::bench {

class ModelEndpoint final : public kj::HttpService {
 public:
  // Listens on 127.0.0.1:port (0: any free port). io is borrowed and outlives this; loop thread only.
  ModelEndpoint(kj::AsyncIoContext& io, std::uint16_t port, std::chrono::milliseconds delay);
  ~ModelEndpoint() noexcept(false);

  std::uint16_t port() const { return port_; }
  // Serves until the promise is dropped.
  kj::Promise<void> run();

  std::size_t answered() const { return answered_; }
  std::size_t connections() const { return connections_; }
  std::size_t max_in_flight() const { return max_in_flight_; }

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& body, Response& response) override;

 private:
  kj::Promise<void> answer(std::string request_body, Response& response);
  kj::Promise<void> accept_loop();

  kj::Timer& timer_;
  kj::Duration delay_;
  kj::Own<kj::ConnectionReceiver> listener_;
  std::uint16_t port_ = 0;
  kj::HttpHeaderTable header_table_;
  kj::HttpServer http_;
  std::size_t in_flight_ = 0;
  std::size_t max_in_flight_ = 0;
  std::size_t answered_ = 0;
  std::size_t connections_ = 0;
  struct Quiet final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}  // a client that went away
  } quiet_;
  kj::TaskSet connections_served_{quiet_};
};

// Runs the endpoint on this thread until stdin closes or SIGTERM/SIGINT; prints "PORT <n>" when
// listening. Returns the exit status.
int serve_model(std::uint16_t port, std::chrono::milliseconds delay);

// Starts the endpoint (in a child process, so the numbers are this process's alone) unless url is
// given, fires `calls` concurrent chat_async calls at it from one KJ loop (openai_chat, max_concurrency
// = calls), and prints the wall time, the threads of this process before and at most during the run,
// and the endpoint's answers. Returns the exit status.
// `agentd-bench --serve-model 0` as a child process of this one (stopped with it): the endpoint
// W7's model row and --model-calls use. Throws std::runtime_error when it does not start.
class EndpointProcess {
 public:
  explicit EndpointProcess(std::chrono::milliseconds delay);
  ~EndpointProcess();
  EndpointProcess(const EndpointProcess&) = delete;
  EndpointProcess& operator=(const EndpointProcess&) = delete;
  // "http://127.0.0.1:PORT/v1", an OpenAI-compatible base URL.
  const std::string& url() const { return url_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string url_;
};

int model_calls_bench(std::size_t calls, std::chrono::milliseconds delay, const std::string& url,
                      bool stream);

}  // namespace agentd::bench
