// HTTP/1.1 clients for W14 (agentd-gateway), alone in their translation unit so that Boost.Beast's
// heavy headers are compiled once: a synchronous keep-alive connection for sequential latencies,
// and any number of asynchronous keep-alive connections on one io_context run by the calling
// thread (a thousand streams cost a socket each, not a thread each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace agentd::bench {

struct HttpAnswer {
  unsigned status = 0;
  std::string body;  // de-chunked
};

// One keep-alive connection, one request at a time, on the calling thread (TCP_NODELAY, like a
// latency-minded client). Throws std::runtime_error naming what failed.
class HttpConnection {
 public:
  HttpConnection(const std::string& host, std::uint16_t port);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  HttpAnswer post_json(const std::string& target, const std::string& body);
  HttpAnswer get(const std::string& target);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What run_load() does: `connections` keep-alive connections are opened first; then each POSTs
// request i (body(i)) to target and, once the whole answer is read, the next request not yet
// sent, until `requests` in all are answered (a closed loop; connections == requests: every
// request at once, each on its own connection).
struct LoadPlan {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::size_t connections = 1;
  std::size_t requests = 1;
  std::string target = "/v1/chat/completions";
  std::function<std::string(std::size_t)> body;
  // Called on the loop thread with each whole answer: "" when right, else what is wrong.
  std::function<std::string(std::size_t, const HttpAnswer&)> check;
  double timeout_seconds = 300;  // for the whole run: what is unanswered then counts as failed
};

struct LoadResult {
  double connect_seconds = 0;  // opening every connection
  double seconds = 0;          // from the first request sent to the last answer read
  std::size_t ok = 0;
  std::size_t failed = 0;  // a check that failed, a connection that broke, the timeout
  std::string first_failure;
  // The most answers whose header had arrived while their body was still coming (for streams:
  // how many were open at once, as the client saw them).
  std::size_t most_open = 0;
};

// Runs plan on this thread. Throws std::runtime_error when the connections cannot be opened.
LoadResult run_load(const LoadPlan& plan);

}  // namespace agentd::bench
