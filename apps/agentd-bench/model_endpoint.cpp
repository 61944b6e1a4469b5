#include "model_endpoint.h"

#include "async_http.h"
#include "chat_models.h"
#include "kj_errors.h"
#include "model_config.h"
#include "model_registry.h"
#include "helper_process.h"
#include "subprocess.h"

#include <agentd/error.h>
#include <agentd/value.h>

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <vector>

namespace agentd::bench {
namespace {

std::size_t words(const std::string& text) {
  std::size_t n = 0;
  bool in = false;
  for (char c : text) {
    bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space && !in) ++n;
    in = !space;
  }
  return n;
}

kj::Promise<void> send(kj::HttpService::Response& response, const kj::HttpHeaderTable& table, unsigned status,
                       kj::StringPtr status_text, kj::StringPtr content_type, std::string text) {
  kj::HttpHeaders headers(table);
  headers.set(kj::HttpHeaderId::CONTENT_TYPE, content_type);
  auto body = kj::heapString(text.data(), text.size());
  auto stream = response.send(status, status_text, headers, body.size());
  auto written = stream->write(body.begin(), body.size());
  return written.attach(kj::mv(stream), kj::mv(body));
}

// Soft RLIMIT_NOFILE up to the hard limit: each request in flight holds a socket.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::size_t fd_limit() {
  rlimit r{};
  return getrlimit(RLIMIT_NOFILE, &r) == 0 ? static_cast<std::size_t>(r.rlim_cur) : 0;
}

}  // namespace

ModelEndpoint::ModelEndpoint(kj::AsyncIoContext& io, std::uint16_t port, std::chrono::milliseconds delay)
    : timer_(io.provider->getTimer()),
      delay_(delay.count() * kj::MILLISECONDS),
      listener_(io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope)->listen()),
      port_(static_cast<std::uint16_t>(listener_->getPort())),
      http_(timer_, header_table_, *this) {}

ModelEndpoint::~ModelEndpoint() noexcept(false) = default;

kj::Promise<void> ModelEndpoint::run() { return accept_loop(); }

kj::Promise<void> ModelEndpoint::accept_loop() {
  return listener_->accept().then([this](kj::Own<kj::AsyncIoStream> stream) {
    ++connections_;
    connections_served_.add(http_.listenHttp(kj::mv(stream)));
    return accept_loop();
  });
}

kj::Promise<void> ModelEndpoint::request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders&,
                                         kj::AsyncInputStream& body, Response& response) {
  std::string path(url.cStr());
  path = path.substr(0, path.find('?'));
  if (method != kj::HttpMethod::POST || path != "/v1/chat/completions") {
    return send(response, header_table_, 404, "Not Found", "application/json",
                R"({"error": {"message": "this endpoint answers POST /v1/chat/completions only"}})");
  }
  return body.readAllText().then(
      [this, &response](kj::String text) { return answer(std::string(text.cStr(), text.size()), response); });
}

kj::Promise<void> ModelEndpoint::answer(std::string request_body, Response& response) {
  Value request = Value::parse(request_body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("messages") || !request["messages"].is_array()) {
    return send(response, header_table_, 400, "Bad Request", "application/json",
                R"({"error": {"message": "expected a JSON body with messages"}})");
  }
  std::string last;
  std::size_t prompt = 0;
  for (const auto& m : request["messages"]) {
    if (m.is_object() && m.contains("content") && m["content"].is_string()) {
      last = m["content"].get<std::string>();
      prompt += words(last);
    }
  }
  const bool stream = request.value("stream", false);
  const std::string model = request.value("model", "bench");
  ++in_flight_;
  max_in_flight_ = std::max(max_in_flight_, in_flight_);
  return timer_.afterDelay(delay_)
      .then([this, &response, stream, model, prompt, reply = "echo: " + last]() -> kj::Promise<void> {
        Value usage = {{"prompt_tokens", prompt},
                       {"completion_tokens", words(reply)},
                       {"total_tokens", prompt + words(reply)}};
        ++answered_;
        if (!stream) {
          Value body = {{"id", "chatcmpl-bench"},
                        {"object", "chat.completion"},
                        {"model", model},
                        {"choices",
                         {{{"index", 0},
                           {"message", {{"role", "assistant"}, {"content", reply}}},
                           {"finish_reason", "stop"}}}},
                        {"usage", usage}};
          return send(response, header_table_, 200, "OK", "application/json", body.dump());
        }
        std::string events;
        auto event = [&](const Value& delta, const Value& finish) {
          Value chunk = {{"id", "chatcmpl-bench"},
                         {"object", "chat.completion.chunk"},
                         {"model", model},
                         {"choices", {{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}}}};
          events += "data: " + chunk.dump() + "\n\n";
        };
        event({{"role", "assistant"}, {"content", ""}}, nullptr);
        for (std::size_t start = 0; start < reply.size();) {
          std::size_t end = reply.find(' ', start);
          end = end == std::string::npos ? reply.size() : end + 1;
          event({{"content", reply.substr(start, end - start)}}, nullptr);
          start = end;
        }
        event(Value::object(), "stop");
        events +=
            "data: " + Value({{"choices", Value::array()}, {"usage", usage}}).dump() + "\n\ndata: [DONE]\n\n";
        kj::HttpHeaders headers(header_table_);
        headers.set(kj::HttpHeaderId::CONTENT_TYPE, "text/event-stream");
        auto out = response.send(200, "OK", headers, nullptr);  // chunked
        auto text = kj::heapString(events.data(), events.size());
        auto written = out->write(text.begin(), text.size());
        return written.attach(kj::mv(out), kj::mv(text));
      })
      .attach(kj::defer([this] { --in_flight_; }));
}

int serve_model(std::uint16_t port, std::chrono::milliseconds delay) {
  raise_fd_limit();
  capture_stop_signals();
  auto io = kj::setupAsyncIo();
  ModelEndpoint endpoint(io, port, delay);
  std::printf("PORT %u\n", static_cast<unsigned>(endpoint.port()));
  std::fflush(stdout);
  std::fprintf(stderr,
               "agentd-bench: model endpoint on http://127.0.0.1:%u/v1 (POST /v1/chat/completions), %lld ms "
               "delay, %zu file descriptors\n",
               static_cast<unsigned>(endpoint.port()), static_cast<long long>(delay.count()), fd_limit());
  endpoint.run().exclusiveJoin(told_to_stop(io)).wait(io.waitScope);
  std::fprintf(
      stderr, "agentd-bench: model endpoint answered %zu requests (at most %zu at once) on %zu connections\n",
      endpoint.answered(), endpoint.max_in_flight(), endpoint.connections());
  return 0;
}

struct EndpointProcess::Impl {
  HelperProcess helper;
};

EndpointProcess::EndpointProcess(std::chrono::milliseconds delay) : impl_(std::make_unique<Impl>()) {
  impl_->helper = start_helper({"--serve-model", "0", "--model-delay-ms", std::to_string(delay.count())},
                               "the model endpoint");
  url_ = "http://127.0.0.1:" + impl_->helper.port_line.substr(5) + "/v1";
}

EndpointProcess::~EndpointProcess() { stop_helper(impl_->helper); }  // it reports what it served

int model_calls_bench(std::size_t calls, std::chrono::milliseconds delay, const std::string& given_url,
                      bool stream) {
  raise_fd_limit();
  std::string url = given_url;
  std::unique_ptr<EndpointProcess> endpoint;
  if (url.empty()) {
    try {
      endpoint = std::make_unique<EndpointProcess>(delay);
    } catch (const std::exception& e) {
      fmt::print(stderr, "agentd-bench: {}\n", e.what());
      return 1;
    }
    url = endpoint->url();
  }
  if (calls + 64 > fd_limit()) {
    fmt::print(stderr, "agentd-bench: {} calls need about {} file descriptors; the limit is {} (ulimit -n)\n",
               calls, calls + 64, fd_limit());
    return 1;
  }

  auto io = kj::setupAsyncIo();
  detail::AsyncHttp http(io);
  Value raw = {{"config_name", "bench"},
               {"model_type", "openai_chat"},
               {"model_name", "bench"},
               {"max_concurrency", calls},
               {"client_args", {{"base_url", url}, {"timeout", 120}, {"max_retries", 0}}}};
  auto model = detail::make_chat_model(detail::model_config_from_json(raw, "agentd-bench"));
  const std::vector<Msg> messages = {Msg("user", Value("hello from the bench"), "user")};

  fmt::print(
      "model calls: {} concurrent {} (openai_chat) from one KJ loop against {}{}\n", calls,
      stream ? "stream_async" : "chat_async", url,
      given_url.empty() ? fmt::format(" (agentd-bench --serve-model, {} ms delay)", delay.count()) : "");
  int status = 0;
  for (const char* round : {"new connections", "kept-alive connections"}) {
    const std::size_t threads_before = agentd::detail::thread_count();
    std::size_t threads_most = threads_before;
    std::size_t ok = 0;
    std::size_t failed = 0;
    std::string first_error;
    const auto started = std::chrono::steady_clock::now();
    kj::Vector<kj::Promise<void>> all;
    for (std::size_t i = 0; i < calls; ++i) {
      auto call = stream ? detail::stream_async(model, http, messages, [](std::string_view) {})
                         : detail::chat_async(model, http, messages);
      all.add(call.then([&ok](ChatResponse) { ++ok; },
                        [&failed, &first_error](kj::Exception&& e) {
                          if (failed++ == 0) first_error = detail::error_from_kj(e).message();
                        }));
    }
    bool done = false;
    auto joined =
        kj::joinPromises(all.releaseAsArray()).then([&done] { done = true; }).eagerlyEvaluate(nullptr);
    while (!done) {  // sample this process's threads while the calls are in flight
      io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
      threads_most = std::max(threads_most, agentd::detail::thread_count());
    }
    joined.wait(io.waitScope);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    fmt::print("  {:<24} {:>6} ok {:>5} failed  {:>8.3f} s total  threads: {} before, {} at most during\n",
               round, ok, failed, seconds, threads_before, threads_most);
    if (failed > 0) {
      fmt::print("  first error: {}\n", first_error);
      status = 1;
    }
  }
  endpoint.reset();  // it reports what it served as it stops
  return status;
}

}  // namespace agentd::bench
