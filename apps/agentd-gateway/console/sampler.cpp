#include "console/sampler.h"

#include <iostream>

#include "console/console_json.h"

#include <chrono>

namespace gateway::console {

namespace {

// A viewer with more ticks than this queued and unwritten misses the next ones.
constexpr std::size_t kMaxUnwrittenTicks = 5;

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Sampler::Sampler(boost::asio::io_context& ioc, Upstream& upstream, nlohmann::json gateway)
    : upstream_(upstream), gateway_(std::move(gateway)), timer_(ioc) {}

void Sampler::start() {
  std::lock_guard lock(mu_);
  arm(std::chrono::steady_clock::now());
}

void Sampler::arm(std::chrono::steady_clock::time_point at) {
  timer_.expires_at(at);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: stopping
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    upstream_.run_blocking([this](Backend* b, const agentd::Error* e) {
      try {
        read(b, e);
      } catch (const std::exception& failure) {  // the next reading is still taken
        std::cerr << "agentd-gateway: console: a reading of the servers failed: " << failure.what() << "\n";
        std::lock_guard lock(mu_);
        if (!stopping_) arm(std::chrono::steady_clock::now() + kInterval);  // replaces an armed wait
      }
    });
  });
}

void Sampler::stop() {
  std::vector<std::shared_ptr<http::Exchange>> viewers;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    timer_.cancel();
    viewers.swap(viewers_);
    waiting_.clear();
  }
  for (auto& v : viewers) v->end_stream();
}

// On a blocking thread; the next reading is armed only once this one is done, so readings never
// overlap (a slow server delays the next one instead).
void Sampler::read(Backend* backend, const agentd::Error* not_connected) {
  const auto began = std::chrono::steady_clock::now();
  auto reading = std::make_shared<Reading>();
  if (!backend) {
    reading->servers.push_back(ServerSnapshot{upstream_.address(), std::nullopt, not_connected->what()});
  } else {
    const std::size_t n = backend->server_count();
    for (std::size_t i = 0; i < n; ++i) {
      ServerSnapshot s;
      s.address = backend->server_address(i);
      auto info = backend->server_info(i);
      if (auto* e = std::get_if<agentd::Error>(&info))
        s.down_reason = e->what();
      else
        s.info = std::move(std::get<agentd::ServerInfo>(info));
      reading->servers.push_back(std::move(s));
    }
  }
  const auto now = std::chrono::steady_clock::now();
  nlohmann::json gateway = gateway_;
  gateway["uptime_seconds"] = std::chrono::duration<double>(now - started_).count();
  nlohmann::json overview = overview_json(std::move(gateway), reading->servers);
  reading->overview = dump(overview);

  std::shared_ptr<const Reading> previous;
  std::chrono::steady_clock::time_point previous_at;
  {
    std::lock_guard lock(mu_);
    previous = latest_;
    previous_at = latest_at_;
  }
  std::string sample;
  if (previous) {
    const double seconds = std::chrono::duration<double>(now - previous_at).count();
    sample = dump(sample_json(make_sample(previous->servers, reading->servers, seconds, unix_ms_now())));
    reading->tick =
        "event: tick\ndata: {\"overview\":" + reading->overview + ",\"sample\":" + sample + "}\n\n";
  }

  std::vector<std::function<void(std::shared_ptr<const Reading>)>> waiting;
  std::vector<std::shared_ptr<http::Exchange>> viewers;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    latest_ = reading;
    latest_at_ = now;
    if (!sample.empty()) {
      samples_.push_back(std::move(sample));
      while (samples_.size() > kSamplesKept) samples_.pop_front();
    }
    waiting.swap(waiting_);
    std::erase_if(viewers_, [](const auto& v) { return v->client_gone(); });
    viewers = viewers_;
    arm(std::max(began + kInterval, std::chrono::steady_clock::now()));
  }
  for (auto& fn : waiting) fn(reading);
  if (!reading->tick.empty())
    for (auto& v : viewers)
      if (v->unwritten() <= kMaxUnwrittenTicks) v->send(reading->tick);
}

void Sampler::with_latest(std::function<void(std::shared_ptr<const Reading>)> fn) {
  std::shared_ptr<const Reading> latest;
  {
    std::lock_guard lock(mu_);
    latest = latest_;
    if (!latest) {
      waiting_.push_back(std::move(fn));
      return;
    }
  }
  fn(std::move(latest));
}

std::string Sampler::history() const {
  std::string out = "{\"interval_ms\":" + std::to_string(kInterval.count()) + ",\"samples\":[";
  std::lock_guard lock(mu_);
  bool first = true;
  for (const auto& s : samples_) {
    if (!first) out += ',';
    first = false;
    out += s;
  }
  return out + "]}";
}

void Sampler::add_viewer(std::shared_ptr<http::Exchange> ex) {
  std::shared_ptr<const Reading> latest;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return ex->end_stream();
    latest = latest_;
    viewers_.push_back(ex);
  }
  if (latest && !latest->tick.empty()) ex->send(latest->tick);
}

}  // namespace gateway::console
