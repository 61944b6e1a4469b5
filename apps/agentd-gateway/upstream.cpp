#include "upstream.h"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>

namespace gateway {

namespace {

agentd::Error as_error(const std::exception& e) {
  if (const auto* a = dynamic_cast<const agentd::Error*>(&e)) return *a;
  return agentd::Error(agentd::ErrorCode::internal, e.what());
}

}  // namespace

namespace {

class ServerBackend final : public Backend {
 public:
  ServerBackend(agentd::Client c, std::string host, std::uint16_t port, agentd::ClientOptions options)
      : client_(std::move(c)), host_(std::move(host)), port_(port), options_(std::move(options)) {}
  agentd::AgentRef agent(const std::string& id) override { return client_.agent(id); }
  std::vector<agentd::AgentInfo> list_agents() override { return client_.list_agents(); }
  agentd::AgentRef create_agent(const std::string& class_name, const agentd::Value& args,
                                const std::string& id) override {
    return client_.create_agent(class_name, id, args, id);
  }
  void delete_agent(const std::string& id) override { client_.delete_agent(id); }
  std::string address() override { return client_.address(); }
  std::size_t server_count() override { return 1; }
  std::string server_address(std::size_t) override { return client_.address(); }
  std::shared_ptr<agentd::Client> server(std::size_t) override {
    return std::shared_ptr<agentd::Client>(std::shared_ptr<void>(), &client_);  // owned by this backend
  }
  // The console's reading, once a second, goes over a connection of its own that never waits
  // for a reconnect: a server that went down shows as down, with the reason, at the next
  // reading, instead of holding the reading for as long as the requests' connection waits for
  // it to come back.
  InfoOrError server_info(std::size_t) override {
    std::shared_ptr<agentd::Client> probe;
    try {
      {
        std::lock_guard lock(probe_mu_);
        if (probe_closed_) return agentd::Error(agentd::ErrorCode::disconnected, "the gateway is stopping");
        if (!probe_) {
          agentd::ClientOptions o = options_;
          o.timeout = std::chrono::seconds(5);
          o.connect_timeout = std::chrono::seconds(2);
          o.reconnect_deadline = std::chrono::milliseconds(0);
          probe_ = std::make_shared<agentd::Client>(agentd::Client::connect(host_, port_, o));
        }
        probe = probe_;
      }
      return probe->info();
    } catch (const std::exception& e) {
      std::lock_guard lock(probe_mu_);
      if (probe_ == probe) probe_.reset();  // connected again at the next reading
      return as_error(e);
    }
  }
  void close() override {
    client_.close();
    std::shared_ptr<agentd::Client> probe;
    {
      std::lock_guard lock(probe_mu_);
      probe_closed_ = true;
      probe.swap(probe_);
    }
    if (probe) probe->close();  // a reading in progress fails at once
  }

 private:
  agentd::Client client_;
  const std::string host_;
  const std::uint16_t port_;
  const agentd::ClientOptions options_;
  std::mutex probe_mu_;
  std::shared_ptr<agentd::Client> probe_;  // guarded by probe_mu_
  bool probe_closed_ = false;              // guarded by probe_mu_
};

class ClusterBackend final : public Backend {
 public:
  explicit ClusterBackend(agentd::Cluster c) : cluster_(std::move(c)) {}
  agentd::AgentRef agent(const std::string& id) override { return cluster_.agent(id); }
  // Every member's agents; members down are skipped (all down: their error).
  std::vector<agentd::AgentInfo> list_agents() override {
    std::vector<agentd::AgentInfo> all;
    std::optional<agentd::Error> failed;
    std::size_t up = 0;
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      try {
        auto some = cluster_.server_shared(i)->list_agents();
        all.insert(all.end(), std::make_move_iterator(some.begin()), std::make_move_iterator(some.end()));
        ++up;
      } catch (const agentd::Error& e) {
        if (!failed) failed = e;
      }
    }
    if (up == 0 && failed) throw *failed;
    return all;
  }
  agentd::AgentRef create_agent(const std::string& class_name, const agentd::Value& args,
                                const std::string& id) override {
    return cluster_.create_agent(class_name, id, args, id);
  }
  // On the member that holds it: each member up is asked in turn.
  void delete_agent(const std::string& id) override {
    std::optional<agentd::Error> failed;
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      try {
        cluster_.server_shared(i)->delete_agent(id);
        return;
      } catch (const agentd::Error& e) {
        if (e.code() != agentd::ErrorCode::unknown_agent || !failed) failed = e;
      }
    }
    if (failed) throw *failed;
    throw agentd::Error(agentd::ErrorCode::unknown_agent, "no agent '" + id + "' on the cluster", id);
  }
  std::string address() override {
    std::string out;
    for (const auto& m : cluster_.members()) out += (out.empty() ? "" : ",") + m.address;
    return out;
  }
  std::size_t server_count() override { return cluster_.size(); }
  std::string server_address(std::size_t i) override {
    auto members = cluster_.members();
    return i < members.size() ? members[i].address : std::string();
  }
  std::shared_ptr<agentd::Client> server(std::size_t i) override { return cluster_.server_shared(i); }
  InfoOrError server_info(std::size_t i) override {
    try {
      if (auto info = cluster_.info(i)) return std::move(*info);
      auto members = cluster_.members();
      std::string why = i < members.size() ? members[i].error : std::string();
      return agentd::Error(agentd::ErrorCode::disconnected, why.empty() ? "down" : why);
    } catch (const std::exception& e) {
      return as_error(e);
    }
  }
  void refresh() override { cluster_.refresh(); }
  void close() override {
    for (std::size_t i = 0; i < cluster_.size(); ++i) {
      try {
        cluster_.server(i).close();
      } catch (const agentd::Error&) {  // down already
      }
    }
  }

 private:
  agentd::Cluster cluster_;
};

}  // namespace

std::unique_ptr<Backend> Upstream::server(const std::string& host, std::uint16_t port,
                                          const agentd::ClientOptions& options) {
  return std::make_unique<ServerBackend>(agentd::Client::connect(host, port, options), host, port, options);
}

std::unique_ptr<Backend> Upstream::cluster(const std::string& spec, const agentd::ClientOptions& options) {
  agentd::ClusterOptions o;
  o.client = options;
  return std::make_unique<ClusterBackend>(agentd::Cluster::open(spec, o));
}

Upstream::Upstream(std::function<std::unique_ptr<Backend>()> connect, std::string address,
                   unsigned blocking_threads)
    : connect_(std::move(connect)), configured_address_(std::move(address)), blocking_(blocking_threads) {
  try {
    backend_ = connect_();
  } catch (const agentd::Error& e) {
    // A spec that cannot work (an address that does not parse, a cluster file with errors) is
    // not tried again: it is the caller's to report.
    if (e.code() == agentd::ErrorCode::bad_args || e.code() == agentd::ErrorCode::config_error) throw;
    first_error_ = e.what();
    last_error_ = e.what();
  } catch (const std::exception& e) {
    first_error_ = e.what();
    last_error_ = e.what();
  }
  connector_ = std::thread([this] { keep_connecting(); });
}

Upstream::~Upstream() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (connector_.joinable()) connector_.join();
  // Closed first: a blocking call still waiting for a server that went away fails at once
  // (disconnected) instead of holding the gateway's exit for the client's timeout. The backend
  // itself lives on until the blocking threads are joined.
  if (backend_) backend_->close();
  blocking_.join();
}

// Connects (backing off from 200 ms to 5 s) until connected, then refreshes every 5 s (a cluster
// connects its members that went down again) until the gateway stops.
void Upstream::keep_connecting() {
  auto wait = std::chrono::milliseconds(200);
  while (true) {
    Backend* connected = nullptr;
    {
      std::unique_lock lock(mu_);
      connected = backend_.get();
      if (connected) wait = std::chrono::seconds(5);
      if (stop_cv_.wait_for(lock, wait, [this] { return stopping_; })) return;
    }
    if (connected) {
      try {
        connected->refresh();
      } catch (const std::exception& e) {
        std::cerr << "agentd-gateway: refreshing the cluster failed: " << e.what() << "\n";
      }
      continue;
    }
    try {
      auto b = connect_();
      std::lock_guard lock(mu_);
      backend_ = std::move(b);
      std::cerr << "agentd-gateway: connected to " << configured_address_ << "\n";
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      last_error_ = e.what();
    }
    wait = std::min(wait * 2, std::chrono::milliseconds(5000));
  }
}

std::variant<Backend*, agentd::Error> Upstream::backend() {
  std::lock_guard lock(mu_);
  if (backend_) return backend_.get();
  return agentd::Error(
      agentd::ErrorCode::disconnected,
      "not connected to " + configured_address_ + " yet (trying again in the background): " + last_error_, "",
      "", true);
}

std::string Upstream::address() const {
  std::lock_guard lock(mu_);
  return backend_ ? backend_->address() : configured_address_;
}

void Upstream::with_agent(const std::string& id, std::function<void(AgentOrError)> done) {
  std::optional<agentd::AgentRef> known;
  {
    std::lock_guard lock(mu_);
    auto it = agents_.find(id);
    if (it != agents_.end()) known = it->second;
  }
  if (known) return done(std::move(*known));
  agent_blocking(
      id, [id](Backend& b) { return b.agent(id); }, std::move(done));
}

void Upstream::agent_blocking(const std::string& id, std::function<agentd::AgentRef(Backend&)> get,
                              std::function<void(AgentOrError)> done) {
  boost::asio::post(blocking_, [this, id, get = std::move(get), done = std::move(done)] {
    std::optional<AgentOrError> result;
    auto c = backend();
    if (auto* e = std::get_if<agentd::Error>(&c)) {
      result.emplace(std::move(*e));
    } else {
      try {
        agentd::AgentRef ref = get(*std::get<Backend*>(c));
        std::lock_guard lock(mu_);
        agents_.insert_or_assign(id, ref);
        result.emplace(std::move(ref));
      } catch (const std::exception& e) {
        result.emplace(as_error(e));
      }
    }
    done(std::move(*result));
  });
}

void Upstream::forget(const std::string& id) {
  std::function<void(const std::string&)> tell;
  {
    std::lock_guard lock(mu_);
    agents_.erase(id);
    tell = on_forget_;
  }
  if (tell) tell(id);
}

void Upstream::on_forget(std::function<void(const std::string& id)> fn) {
  std::lock_guard lock(mu_);
  on_forget_ = std::move(fn);
}

void Upstream::create_agent(const std::string& class_name, agentd::Value args, const std::string& id,
                            std::function<void(AgentOrError)> done) {
  agent_blocking(
      id,
      [class_name, args = std::move(args), id](Backend& b) { return b.create_agent(class_name, args, id); },
      std::move(done));
}

void Upstream::delete_agent(const std::string& id, std::function<void(std::optional<agentd::Error>)> done) {
  boost::asio::post(blocking_, [this, id, done = std::move(done)] {
    {
      std::lock_guard lock(mu_);
      agents_.erase(id);
    }
    std::optional<agentd::Error> result;
    auto c = backend();
    if (auto* e = std::get_if<agentd::Error>(&c)) {
      result.emplace(std::move(*e));
    } else {
      try {
        std::get<Backend*>(c)->delete_agent(id);
      } catch (const std::exception& e) {
        result.emplace(as_error(e));
      }
    }
    done(std::move(result));
  });
}

void Upstream::run_blocking(std::function<void(Backend*, const agentd::Error*)> fn) {
  boost::asio::post(blocking_, [this, fn = std::move(fn)] {
    // fn answers its own errors; what escapes it is logged here, not left to end the gateway.
    try {
      auto c = backend();
      if (auto* e = std::get_if<agentd::Error>(&c)) return fn(nullptr, e);
      fn(std::get<Backend*>(c), nullptr);
    } catch (const std::exception& e) {
      std::cerr << "agentd-gateway: a request's work failed: " << e.what() << "\n";
    }
  });
}

void Upstream::list_agents(std::function<void(AgentsOrError)> done) {
  boost::asio::post(blocking_, [this, done = std::move(done)] {
    std::optional<AgentsOrError> result;
    auto c = backend();
    if (auto* e = std::get_if<agentd::Error>(&c)) {
      result.emplace(std::move(*e));
    } else {
      try {
        result.emplace(std::get<Backend*>(c)->list_agents());
      } catch (const std::exception& e) {
        result.emplace(as_error(e));
      }
    }
    done(std::move(*result));
  });
}

}  // namespace gateway
