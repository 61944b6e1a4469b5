// One HTTP POST on a libcurl easy handle, shared by the blocking client (http_client.cpp, one
// easy handle per thread) and the asynchronous one (async_http.cpp, easy handles on a curl multi
// handle driven by a KJ loop): the same options (timeouts, headers, proxies from the environment,
// TLS defaults), the same callbacks and the same classification of how an attempt ended.
// Private to src/models.
#pragma once

#include "http_client.h"

#include <curl/curl.h>

#include <chrono>
#include <exception>

namespace agentd::detail {

// libcurl's global initialisation, once per process (any thread).
void init_curl_once();

// The state libcurl's callbacks share during one transfer. Lives as long as the transfer, at a
// fixed address (the callbacks hold a pointer to it); used on one thread at a time.
class CurlTransfer {
 public:
  // Sets every option of `curl` (fresh or reset) for one POST of `request`; a 2xx body of a
  // streaming request goes to `sink`. curl, request and sink are borrowed and outlive this.
  CurlTransfer(CURL* curl, const HttpRequest& request, const BodySink& sink);
  ~CurlTransfer();  // unhooks the header list from the handle
  CurlTransfer(const CurlTransfer&) = delete;
  CurlTransfer& operator=(const CurlTransfer&) = delete;

  // How the attempt ended, given libcurl's result for it. Rethrows what the sink threw.
  HttpAttempt finish(CURLcode rc);

  // Marks the transfer as stalled (a streaming request silent for longer than its timeout); the
  // caller then ends it, and finish() reports a timeout.
  void mark_idle_timeout() { idle_timeout_ = true; }
  // The last time a byte (header or body) arrived.
  std::chrono::steady_clock::time_point last_activity() const { return last_activity_; }

 private:
  static size_t on_header(char* data, size_t size, size_t count, void* user);
  static size_t on_body(char* data, size_t size, size_t count, void* user);
  static int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

  CURL* curl_;
  const HttpRequest& request_;
  const BodySink& sink_;
  curl_slist* headers_ = nullptr;
  HttpResponse response_;
  std::exception_ptr sink_error_;
  std::chrono::steady_clock::time_point last_activity_ = std::chrono::steady_clock::now();
  bool idle_timeout_ = false;
  bool too_large_ = false;
};

// What to do after attempt number `attempt_no` (0 for the first) of a POST with retries:
// `response` holds the 2xx answer when done; otherwise `wait` is how long to wait before the
// next attempt. Throws Error(model_error) when the attempt failed for good (see post_with_retries).
struct RetryStep {
  std::optional<HttpResponse> response;
  std::chrono::milliseconds wait{0};
};
RetryStep next_retry_step(const CallSite& site, const RetryPolicy& policy, const std::string& url,
                          int attempt_no, HttpAttempt attempt);

}  // namespace agentd::detail
