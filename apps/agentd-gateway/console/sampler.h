// The console's one reader of the servers: once a second (a timer on the io_context, its
// blocking calls on Upstream's blocking threads, never two readings at once) it reads every
// server's ServerInfo, keeps the last 300 samples (sampling.h), and pushes `event: tick` to
// every open /console/api/events stream. Viewers never cause a reading: they share this one.
//
// A slow viewer holds up nobody: a tick is only queued on its connection (Exchange::send posts);
// a viewer with more than a few ticks still unwritten misses ticks, and one that has not read
// for long is closed by the connection's write timeout.
#pragma once

#include "console/sampling.h"
#include "http/connection.h"
#include "upstream.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gateway::console {

// One reading of every server, with what the console answers from it.
struct Reading {
  std::vector<ServerSnapshot> servers;
  std::string overview;  // /console/api/overview's body
  std::string tick;      // the `event: tick` of it (empty for the first reading: no interval yet)
};

class Sampler {
 public:
  static constexpr std::size_t kSamplesKept = 300;
  static constexpr std::chrono::milliseconds kInterval{1000};

  // gateway: the overview's "gateway" object; uptime_seconds is filled in at each reading.
  // ioc and upstream are borrowed and outlive this object (upstream's blocking threads are
  // joined before it goes).
  Sampler(boost::asio::io_context& ioc, Upstream& upstream, nlohmann::json gateway);
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  void start();
  // No more readings; open event streams are ended. After the io_context has stopped.
  void stop();

  // fn(latest) now when there is a reading, else once the first is made (on a blocking thread).
  // Any thread.
  void with_latest(std::function<void(std::shared_ptr<const Reading>)> fn);
  // {"interval_ms", "samples": [...]}, oldest first. Any thread.
  std::string history() const;
  // ex's event stream (started by the caller) gets every tick from now on, the latest at once.
  void add_viewer(std::shared_ptr<http::Exchange> ex);

 private:
  void arm(std::chrono::steady_clock::time_point at);  // holding mu_
  void read(Backend* backend, const agentd::Error* not_connected);

  Upstream& upstream_;
  const nlohmann::json gateway_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;
  boost::asio::steady_timer timer_;  // guarded by mu_
  bool stopping_ = false;
  std::shared_ptr<const Reading> latest_;
  std::chrono::steady_clock::time_point latest_at_{};
  std::deque<std::string> samples_;  // JSON text of each sample
  std::vector<std::function<void(std::shared_ptr<const Reading>)>> waiting_;
  std::vector<std::shared_ptr<http::Exchange>> viewers_;
};

}  // namespace gateway::console
