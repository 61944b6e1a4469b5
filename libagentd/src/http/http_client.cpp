#include "http_client.h"

#include "curl_transfer.h"

#include <agentd/error.h>
#include <agentd/value_limits.h>

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

namespace agentd::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kMaxBufferedBody = 64u << 20;  // answers larger than this are refused

// One easy handle per thread, reset before each use, so keep-alive connections are reused.
class ThreadCurl {
 public:
  ThreadCurl() {
    init_curl_once();
    handle_ = curl_easy_init();
  }
  ~ThreadCurl() {
    if (handle_ != nullptr) curl_easy_cleanup(handle_);
  }
  ThreadCurl(const ThreadCurl&) = delete;
  ThreadCurl& operator=(const ThreadCurl&) = delete;
  CURL* get() {
    curl_easy_reset(handle_);
    return handle_;
  }

 private:
  CURL* handle_ = nullptr;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::optional<milliseconds> parse_retry_after(std::string_view value, bool in_ms) {
  value = trim(value);
  double number = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (ec == std::errc() && ptr == value.data() + value.size()) {
    if (number < 0) return std::nullopt;
    return milliseconds(static_cast<std::int64_t>(in_ms ? number : number * 1000.0));
  }
  if (in_ms) return std::nullopt;
  std::string date(value);
  time_t when = curl_getdate(date.c_str(), nullptr);  // an HTTP-date
  if (when < 0) return std::nullopt;
  auto delta = static_cast<std::int64_t>(when) - static_cast<std::int64_t>(std::time(nullptr));
  return milliseconds(std::max<std::int64_t>(0, delta) * 1000);
}

std::string redact(std::string text, std::string_view secret) {
  if (secret.size() < 4) return text;  // too short to be a real key; redacting would garble text
  for (std::size_t pos; (pos = text.find(secret)) != std::string::npos;) {
    text.replace(pos, secret.size(), "***");
  }
  return text;
}

}  // namespace

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string url_for_messages(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  const std::size_t scheme = url.find("://");
  const std::size_t host = scheme == std::string_view::npos ? 0 : scheme + 3;
  const std::size_t path = std::min(url.find('/', host), url.size());
  const std::size_t at = url.substr(0, path).rfind('@');
  if (at == std::string_view::npos || at < host) return std::string(url);
  return std::string(url.substr(0, host)) + std::string(url.substr(at + 1));
}

CurlTransfer::CurlTransfer(CURL* curl, const HttpRequest& request, const BodySink& sink)
    : curl_(curl), request_(request), sink_(sink) {
  auto add = [this](const std::string& h) { headers_ = curl_slist_append(headers_, h.c_str()); };
  const bool post = request.method.empty() || request.method == "POST";
  if (post) add("Content-Type: application/json");
  if (!request.accept.empty()) {
    add("Accept: " + request.accept);
  } else {
    add(request.stream ? "Accept: text/event-stream, application/x-ndjson, application/json"
                       : "Accept: application/json");
  }
  add("Expect:");  // no 100-continue round trip
  for (const auto& h : request.headers) add(h);

  auto timeout_ms = static_cast<long>(std::max<std::int64_t>(1, request.timeout.count()));
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  if (post) {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);  // no body; the handle was reset, so no stale method
    if (request.method != "GET") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "agentd");
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &CurlTransfer::on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &CurlTransfer::on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, this);
  if (request.stream) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &CurlTransfer::on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, this);
  } else {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  }
}

CurlTransfer::~CurlTransfer() {
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, nullptr);  // the list dies with this object
  curl_slist_free_all(headers_);
}

size_t CurlTransfer::on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<CurlTransfer*>(user);
  size_t n = size * count;
  t->last_activity_ = Clock::now();
  std::string_view line(data, n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->response_.retry_after.reset();  // a new header block (after 100 Continue, ...)
    t->response_.headers.clear();
    return n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string_view name = trim(line.substr(0, colon));
  std::string_view value = line.substr(colon + 1);
  for (const std::string& wanted : t->request_.keep_headers) {
    if (iequals(name, wanted)) {
      std::string lower(name);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      t->response_.headers.emplace_back(std::move(lower), std::string(trim(value)));
      break;
    }
  }
  if (iequals(name, "retry-after-ms")) {
    if (auto ms = parse_retry_after(value, true)) t->response_.retry_after = ms;
  } else if (iequals(name, "retry-after") && !t->response_.retry_after) {
    t->response_.retry_after = parse_retry_after(value, false);
  }
  return n;
}

size_t CurlTransfer::on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<CurlTransfer*>(user);
  size_t n = size * count;
  t->last_activity_ = Clock::now();
  long status = 0;
  curl_easy_getinfo(t->curl_, CURLINFO_RESPONSE_CODE, &status);
  if (t->request_.stream && t->sink_ && status >= 200 && status < 300) {
    try {
      if (!t->response_.streamed && t->request_.on_head) {
        t->response_.status = status;
        t->request_.on_head(t->response_);
      }
      t->response_.streamed = true;
      t->sink_(std::string_view(data, n));
    } catch (...) {
      t->sink_error_ = std::current_exception();
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    return n;
  }
  const std::size_t limit =
      t->request_.max_buffered_body != 0 ? t->request_.max_buffered_body : kMaxBufferedBody;
  if (t->response_.body.size() + n > limit) {
    t->response_.body.append(data,
                             limit - std::min(limit, t->response_.body.size()));  // its start, for messages
    t->too_large_ = true;
    return 0;
  }
  t->response_.body.append(data, n);
  return n;
}

// Called by libcurl about once a second and on every chunk (blocking transfers; the asynchronous
// client also runs its own watchdog on the loop's timer): enforces the streaming idle timeout.
int CurlTransfer::on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<CurlTransfer*>(user);
  if (Clock::now() - t->last_activity_ > t->request_.timeout) {
    t->idle_timeout_ = true;
    return 1;
  }
  return 0;
}

HttpAttempt CurlTransfer::finish(CURLcode rc) {
  HttpAttempt attempt;
  curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response_.status);
  if (sink_error_) std::rethrow_exception(sink_error_);
  attempt.response = std::move(response_);
  if (rc == CURLE_OK && !idle_timeout_) return attempt;

  using Failure = HttpAttempt::Failure;
  attempt.error = curl_easy_strerror(rc);
  if (rc == CURLE_OPERATION_TIMEDOUT || idle_timeout_) {
    attempt.failure = Failure::timeout;
    attempt.error = request_.stream ? "no data for " + std::to_string(request_.timeout.count()) + " ms"
                                    : "timed out after " + std::to_string(request_.timeout.count()) + " ms";
  } else if (too_large_) {
    attempt.failure = Failure::fatal;
    const std::size_t limit = request_.max_buffered_body;
    attempt.error = limit == 0 || limit == kMaxBufferedBody
                        ? "answer larger than " + std::to_string(kMaxBufferedBody >> 20) + " MiB"
                        : "answer larger than " + std::to_string(limit) + " bytes";
  } else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_SSL_CONNECT_ERROR) {
    attempt.failure = Failure::connect;
  } else if (rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING ||
             rc == CURLE_PARTIAL_FILE || rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM) {
    attempt.failure = Failure::transfer;
  } else {
    attempt.failure = Failure::fatal;  // bad URL, unknown host, TLS certificate, ...
  }
  return attempt;
}

HttpAttempt http_post(const HttpRequest& request, const BodySink& sink) {
  thread_local ThreadCurl thread_curl;
  CURL* curl = thread_curl.get();
  if (curl == nullptr) {
    HttpAttempt attempt;
    attempt.failure = HttpAttempt::Failure::fatal;
    attempt.error = "cannot create a libcurl handle";
    return attempt;
  }
  CurlTransfer transfer(curl, request, sink);
  return transfer.finish(curl_easy_perform(curl));
}

milliseconds backoff_delay(const RetryPolicy& policy, int retry) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  double d = static_cast<double>(policy.initial_delay.count());
  for (int i = 0; i < retry && d < static_cast<double>(policy.max_delay.count()); ++i) d *= 2;
  d = std::min(d, static_cast<double>(policy.max_delay.count()));
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return milliseconds(static_cast<std::int64_t>(d * jitter(rng)));
}

void throw_model_error(const CallSite& site, std::string message, bool retryable) {
  throw Error(ErrorCode::model_error,
              redact("model '" + std::string(site.config_name) + "': " + std::move(message), site.secret), {},
              {}, retryable);
}

std::string endpoint_error_message(std::string_view body) {
  Value v = parse_value(body).value;  // bounded; discarded when not JSON
  auto text_of = [](const Value& x) -> std::string {
    return x.is_string() ? x.get<std::string>() : x.dump();
  };
  if (v.is_object()) {
    if (auto e = v.find("error"); e != v.end()) {
      if (e->is_object()) {
        if (auto m = e->find("message"); m != e->end()) return text_of(*m);
      } else if (!e->is_null()) {
        return text_of(*e);
      }
    }
    for (const char* key : {"message", "detail", "msg", "error_msg"}) {
      if (auto m = v.find(key); m != v.end() && !m->is_null()) {
        std::string out = text_of(*m);
        if (auto code = v.find("code"); code != v.end() && code->is_string()) {
          out = code->get<std::string>() + ": " + out;
        }
        return out;
      }
    }
  }
  std::string text(trim(body));
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return text.empty() ? "(empty body)" : text;
}

RetryStep next_retry_step(const CallSite& site, const RetryPolicy& policy, const std::string& url,
                          int attempt_no, HttpAttempt a) {
  const long status = a.response.status;
  const bool last = attempt_no >= policy.max_retries;
  const std::string attempts =
      attempt_no == 0 ? "" : " (after " + std::to_string(attempt_no + 1) + " attempts)";
  RetryStep step;
  if (a.failure == HttpAttempt::Failure::none) {
    if (status >= 200 && status < 300) {
      step.response = std::move(a.response);
      return step;
    }
    std::string message =
        "HTTP " + std::to_string(status) + " from " + url + ": " + endpoint_error_message(a.response.body);
    bool retryable = status == 429 || status >= 500 || status == 408;
    if (!retryable) throw_model_error(site, message, false);
    if (last) throw_model_error(site, message + attempts, true);
    step.wait = backoff_delay(policy, attempt_no);
    if (status == 429 && a.response.retry_after) {
      if (*a.response.retry_after > policy.max_delay) {
        throw_model_error(site,
                          message + "; the endpoint asks to retry after " +
                              std::to_string(a.response.retry_after->count()) + " ms" + attempts,
                          true);
      }
      step.wait = *a.response.retry_after;
    }
    return step;
  }
  std::string message = "request to " + url + " failed: " + a.error;
  if (a.failure == HttpAttempt::Failure::fatal) throw_model_error(site, message, false);
  if (a.response.streamed) {
    // Part of the answer already reached the caller; a retry would repeat it.
    throw_model_error(site, "stream from " + url + " broke off: " + a.error, true);
  }
  if (last) throw_model_error(site, message + attempts, true);
  step.wait = backoff_delay(policy, attempt_no);
  return step;
}

HttpResponse post_with_retries(const CallSite& site, const RetryPolicy& policy, const HttpRequest& request,
                               const BodySink& sink) {
  const std::string url = url_for_messages(request.url);
  for (int attempt_no = 0;; ++attempt_no) {
    RetryStep step = next_retry_step(site, policy, url, attempt_no, http_post(request, sink));
    if (step.response) return std::move(*step.response);
    std::this_thread::sleep_for(step.wait);
  }
}

void SseDecoder::feed(std::string_view bytes) {
  lines_.feed(bytes, [this](std::string_view line) { on_line(line); });
}

void SseDecoder::finish() {
  lines_.finish([this](std::string_view line) { on_line(line); });
  dispatch();
}

void SseDecoder::on_line(std::string_view line) {
  if (line.empty()) {
    dispatch();
    return;
  }
  if (line.front() == ':') return;  // comment / keep-alive
  std::string_view field = line;
  std::string_view value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    event_ = value;
  }
}

void SseDecoder::dispatch() {
  if (has_data_) {
    std::string event = std::move(event_);
    std::string data = std::move(data_);
    event_.clear();
    data_.clear();
    has_data_ = false;
    on_event_(event, data);
  } else {
    event_.clear();
  }
}

}  // namespace agentd::detail
