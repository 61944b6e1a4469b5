// Client::create_agent and Client::create_agents: agents made by create calls on the session.
#include <agentd/client.h>

#include "call_batch.h"
#include "call_done.h"
#include "client_core.h"
#include "value_codec.h"

#include <fmt/format.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace agentd {

namespace {

detail::OutSpec create_spec(const std::string& class_name, const std::string& name, const Value& args,
                            const std::string& id) {
  auto spec = detail::spec_for(wire::CallKind::CREATE, id);
  spec.class_name = class_name;
  spec.name = name;
  spec.args = args;
  return spec;
}

// Loop thread: deletes agent id, not waiting for (or reporting) the answer.
void delete_quietly(detail::LoopState& loop, const std::string& id) {
  detail::after_calls_sent(loop, [&loop, id]() {
    auto req = loop.server.deleteAgentRequest();
    req.setId(detail::to_kj(id));
    loop.tasks.add(req.send().ignoreResult());
  });
}

}  // namespace

AgentRef Client::create_agent(const std::string& class_name, const std::string& name, const Value& args,
                              const std::string& id) {
  std::string made = core_->call_sync<std::string>(
      fmt::format("create {} agent", class_name), create_spec(class_name, name, args, id),
      [](wire::CallDone::Reader d) {
        detail::throw_if_error(d);
        if (!d.isCreated()) throw Error(ErrorCode::internal, "the server answered a create oddly");
        return detail::to_std(d.getCreated());
      });
  return AgentRef(core_, made, name.empty() ? made : name, class_name);
}

std::vector<AgentRef> Client::create_agents(const std::string& class_name, std::size_t count,
                                            const Value& args, const std::string& name_prefix,
                                            std::size_t first_index) {
  // Shared by the caller and the loop thread's callbacks; guarded by mu.
  struct Batch {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t pending = 0;
    std::vector<std::string> ids;  // by index; empty where creation failed
    // By index: the server answered that the creation failed (nothing was made). The others
    // that are not in ids were lost with the connection: they may have been made.
    std::vector<char> refused;
    std::optional<Error> first_error;  // by index order
    std::size_t first_error_index = 0;
    bool abandoned = false;  // the caller timed out: stop, and delete what gets made
  };
  auto b = std::make_shared<Batch>();
  b->pending = count;
  b->ids.resize(count);
  b->refused.resize(count, 0);
  if (count == 0) return {};
  auto name_of = [&](std::size_t i) {
    return name_prefix.empty() ? std::string{} : name_prefix + std::to_string(first_index + i);
  };
  // The ids are chosen here, so that a creation whose answer is lost (the connection went) can
  // still be found, and undone, by id.
  std::vector<std::string> asked(count);
  std::vector<detail::OutSpec> specs(count);
  for (std::size_t i = 0; i < count; ++i) {
    asked[i] = new_id();
    specs[i] = create_spec(class_name, name_of(i), args, asked[i]);
  }
  core_->requests_.fetch_add(1, std::memory_order_relaxed);
  core_->waits_.fetch_add(1, std::memory_order_relaxed);
  // At most kWindow creations in flight: each answer sends the next, so neither side holds
  // count pending requests at once (a high-water mark that would stay in the server's RSS).
  constexpr std::size_t kWindow = 2048;
  struct Sender {  // loop thread only
    std::vector<detail::OutSpec> specs;
    std::size_t next = 0;
  };
  auto sender = std::make_shared<Sender>();
  sender->specs = std::move(specs);
  core_->post([c = core_.get(), b, sender]() mutable {
    // Records one answer. Returns true when the caller has given up (the agent must go).
    auto finish = [b](std::size_t i, std::optional<std::string> id, std::optional<Error> e) {
      {
        std::lock_guard lock(b->mu);
        if (b->abandoned) return true;
        if (id) b->ids[i] = std::move(*id);
        if (e && (!b->first_error || i < b->first_error_index)) {
          b->first_error = std::move(e);
          b->first_error_index = i;
        }
        if (--b->pending > 0) return false;
      }
      b->cv.notify_all();
      return false;
    };
    // Loop thread: sends the next spec, whose answer sends the one after it.
    auto send_next = std::make_shared<std::function<void()>>();
    *send_next = [c, b, sender, finish, weak = std::weak_ptr<std::function<void()>>(send_next)]() {
      if (sender->next >= sender->specs.size()) return;
      std::size_t i = sender->next++;
      auto again = weak.lock();
      detail::Ticket t;
      t.on_done = [c, b, finish, i, again](wire::CallDone::Reader d) {
        bool abandoned = false;
        if (d.isCreated()) {
          std::string id = detail::to_std(d.getCreated());
          abandoned = finish(i, id, std::nullopt);
          if (abandoned) delete_quietly(c->loop(), id);
        } else if (d.isError()) {
          {
            std::lock_guard lock(b->mu);
            b->refused[i] = 1;
          }
          abandoned = finish(i, std::nullopt, detail::read_error(d.getError()));
        } else {
          abandoned =
              finish(i, std::nullopt, Error(ErrorCode::internal, "the server answered a create oddly"));
        }
        if (!abandoned) (*again)();
      };
      t.on_fail = [finish, i, sender](const Error& e) {
        finish(i, std::nullopt, e);
        // The connection is gone: what was never sent fails the same way.
        while (sender->next < sender->specs.size()) finish(sender->next++, std::nullopt, e);
      };
      detail::send_spec(c->loop(), std::move(sender->specs[i]), std::move(t));
    };
    for (std::size_t k = 0; k < kWindow; ++k) (*send_next)();
  });
  core_->check_open("create agents");
  {
    std::unique_lock lock(b->mu);
    if (!b->cv.wait_for(lock, core_->options().timeout, [&] { return b->pending == 0; })) {
      // Give up: no more are sent, and every agent made (now or later) is deleted again.
      b->abandoned = true;
      std::vector<std::string> made;
      for (auto& id : b->ids)
        if (!id.empty()) made.push_back(std::move(id));
      lock.unlock();
      core_->post([c = core_.get(), made = std::move(made)]() {
        for (const auto& id : made) delete_quietly(c->loop(), id);
      });
      throw Error(ErrorCode::timeout,
                  fmt::format("create {} {} agents: not all were made within {} ms; the ones "
                              "made are being deleted again",
                              count, class_name, core_->options().timeout.count()),
                  "", class_name, true);
    }
  }
  if (b->first_error) {
    // All or nothing: delete every agent that was made, and every one that may have been (its
    // answer was lost with the connection: after a reconnect the server says whether it exists).
    std::size_t deleted = 0;
    std::vector<std::string> left;  // may exist: the server could not be asked
    std::string why_left;
    for (std::size_t i = 0; i < count; ++i) {
      if (b->refused[i]) continue;
      try {
        delete_agent(asked[i]);
        ++deleted;
      } catch (const Error& e) {
        if (e.code() == ErrorCode::unknown_agent) continue;  // never made
        left.push_back(asked[i]);
        if (why_left.empty()) why_left = e.message();
      }
    }
    const Error& e = *b->first_error;
    std::string outcome = fmt::format("{} were made and deleted again", deleted);
    if (!left.empty())
      outcome += fmt::format("; {} may exist and could not be deleted ({}): delete them by id, first {}",
                             left.size(), why_left, left.front());
    throw Error(e.code(),
                fmt::format("{} (creating {} {} agents; {})", e.message(), count, class_name, outcome),
                e.agent_id(), e.agent_class(), e.retryable());
  }
  std::vector<AgentRef> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::string name = name_of(i);
    out.push_back(AgentRef(core_, b->ids[i], name.empty() ? b->ids[i] : name, class_name));
  }
  return out;
}

}  // namespace agentd
