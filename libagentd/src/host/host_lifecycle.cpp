// AgentHost's lifecycle (agent_host.h): creating, cloning and removing agents, and stopping.
// Constructors and destructors are agent code: they run on the lifecycle pool, without the lock.
#include "agent_host.h"

#include "agent_access.h"
#include "agent_code.h"
#include "agent_services.h"
#include "bridge.h"
#include "mailbox.h"
#include "persistence.h"
#include "plugin_loader.h"
#include "worker_pool.h"

#include <fmt/format.h>

namespace agentd::detail {

std::variant<std::string, Error> AgentHost::create(const std::string& class_name, const std::string& name,
                                                   Value args, std::string id, CreateDone done,
                                                   std::shared_ptr<AgentSeed> seed) {
  if (args.is_null()) args = Value::object();  // unset args (a raw client's) are no args
  Locked lock(*this);
  if (stopping_) return Error(ErrorCode::stopping, "the server is shutting down");
  if (StateStore* store = store_.load(); store != nullptr && (!seed || seed->persist)) {
    if (auto failure = store->failure()) return *failure;
  }
  const AgentClass* cls = catalog_.find(class_name);
  if (cls == nullptr) {
    std::string known;
    for (const auto& n : catalog_.names()) known += (known.empty() ? "" : ", ") + n;
    return Error(ErrorCode::unknown_class,
                 fmt::format("no agent class '{}' on this server; known classes: {}", class_name,
                             known.empty() ? "(none: start as_server with --plugin)" : known));
  }
  if (limits_.max_agents != 0 && agents_.size() >= limits_.max_agents)
    return Error(ErrorCode::overloaded,
                 fmt::format("the server has {} agents, its limit (--max-agents {}); delete some "
                             "or try again later",
                             agents_.size(), limits_.max_agents),
                 id, class_name);
  if (id.empty()) id = new_id();
  if (agents_.count(id))
    return Error(ErrorCode::duplicate_agent,
                 fmt::format("an agent with id '{}' already exists; pick another id or delete it", id), id,
                 class_name);
  auto slot = std::make_shared<AgentSlot>();
  slot->id = id;
  slot->name = name.empty() ? id : name;
  slot->class_name = class_name;
  slot->usage = services_.usage_counter(id);
  agents_.emplace(id, slot);
  index_add(*slot);
  mailboxes_.constructor_started();
  AgentInit init{slot->id, slot->name, class_name, std::move(args), &services_};
  AgentFactory factory = cls->factory;
  auto done_ptr = std::make_shared<CreateDone>(std::move(done));
  lifecycle_.submit([this, slot, factory, init = std::move(init), done_ptr, seed]() mutable {
    std::unique_ptr<Agent> made;
    auto err = guarded(*slot, "constructor", [&] { made = factory(std::move(init)); });
    if (!err && seed) {
      AgentAccess::set_memory(made->memory(), std::move(seed->memory));
      err = guarded(*slot, "load_state", [&] { made->load_state(seed->state); });
    }
    auto holder = std::make_shared<std::unique_ptr<Agent>>(std::move(made));
    std::optional<StateStore::Change> change;
    if (!err && store_.load() != nullptr) {
      Agent& agent = **holder;
      if (!seed || seed->persist) {
        err = guarded(*slot, "save_state", [&] { change = initial_change(*slot, agent); });
      } else {
        // Restored: the store has it; remember what it holds (the change itself is not needed).
        slot->saved_memory = agent.memory().size();
        StateStore::Change held;
        err = guarded(*slot, "save_state", [&] { record_own_state(*slot, agent, held); });
      }
    }
    // done_ptr moves on: the last copy of a CreateDone must die on the loop thread (agent_host.h).
    bridge_.post([this, slot, holder, err = std::move(err), done_ptr = std::move(done_ptr),
                  change = std::move(change)]() mutable {
      Locked lock(*this);
      mailboxes_.constructor_returned();
      if (err) {
        Error e(err->code() == ErrorCode::agent_failed ? ErrorCode::bad_args : err->code(), err->message(),
                slot->id, slot->class_name);
        if (!slot->removed) {
          agents_.erase(slot->id);
          index_remove(*slot);
        }
        slot->removed = true;
        for (auto& c : mailboxes_.take_waiting(*slot)) fail(c, e);  // all: none started
        if (*done_ptr) defer([done_ptr, e]() { (*done_ptr)(e); });
        return;
      }
      slot->agent = std::move(*holder);
      slot->async = dynamic_cast<AsyncAgent*>(slot->agent.get());
      slot->busy = false;
      slot->constructing = false;
      if (slot->removed) {
        destroy_agent(*slot);
        if (*done_ptr)
          defer([done_ptr, slot]() {
            (*done_ptr)(Error(ErrorCode::unknown_agent, "the agent was deleted while being created", slot->id,
                              slot->class_name));
          });
        return;
      }
      StateStore* store = store_.load();
      if (change && store != nullptr) {
        // Acknowledged once committed; its calls may run meanwhile (their commits come after).
        // The completion runs on the store's writer thread with the host lock held (the done
        // scope), or inline from submit; done_ptr moves through it to the loop thread.
        auto committed = [this, slot, done_ptr = std::move(done_ptr)](const Error* failed) mutable {
          std::optional<Error> e;
          if (failed != nullptr) e = store_error(*failed, slot->id, slot->class_name);
          std::optional<AgentInfoRow> row;
          if (!e) row = row_of(*slot);
          defer(
              [this, slot, done_ptr = std::move(done_ptr), e = std::move(e), row = std::move(row)]() mutable {
                on_loop([this, slot, done_ptr = std::move(done_ptr), e = std::move(e),
                         row = std::move(row)]() mutable {
                  if (e) remove(slot->id);
                  if (!*done_ptr) return;
                  if (e)
                    (*done_ptr)(*e);
                  else
                    (*done_ptr)(*row);
                });
              });
        };
        store->submit(std::move(*change), std::move(committed));
      } else if (*done_ptr) {
        defer([done_ptr, row = row_of(*slot)]() { (*done_ptr)(row); });
      }
      mailboxes_.pump(slot);
    });
  });
  return id;
}

std::optional<Error> AgentHost::clone(const std::string& source_id, const std::string& name, std::string id,
                                      CreateDone done) {
  Locked lock(*this);
  auto it = agents_.find(source_id);
  if (it == agents_.end())
    return Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server to clone", source_id),
                 source_id);
  if (!id.empty() && agents_.count(id))
    return Error(ErrorCode::duplicate_agent,
                 fmt::format("an agent with id '{}' already exists; pick another id or delete it", id), id);
  auto call = std::make_shared<Call>();
  call->kind = Call::Kind::snapshot;
  call->has_on_done = true;
  auto done_ptr = std::make_shared<CreateDone>(std::move(done));
  call->on_done = [this, cls = it->second->class_name, name, id = std::move(id), done_ptr](Call& c) mutable {
    if (c.out_error) {
      if (*done_ptr) (*done_ptr)(*c.out_error);
      return;
    }
    auto seed = std::make_shared<AgentSeed>();
    seed->state = std::move(c.out_value["state"]);
    seed->memory = std::move(c.out_memory);
    auto made = create(cls, name, std::move(c.out_value["args"]), std::move(id), *done_ptr, seed);
    if (const Error* e = std::get_if<Error>(&made); e != nullptr && *done_ptr) (*done_ptr)(*e);
  };
  enqueue_locked(source_id, std::move(call));
  return std::nullopt;
}

bool AgentHost::remove(const std::string& id) {
  Locked lock(*this);
  return remove_one(id, /*save=*/true);
}

bool AgentHost::remove_one(const std::string& id, bool save) {
  auto it = agents_.find(id);
  if (it == agents_.end()) return false;
  auto slot = it->second;
  agents_.erase(it);
  index_remove(*slot);
  services_.forget_agent(id);  // a new agent under this id starts from zero
  if (StateStore* store = store_.load(); store != nullptr && save) {
    StateStore::Change c;
    c.kind = StateStore::Change::Kind::delete_agent;
    c.agent_id = id;
    store->submit(std::move(c), nullptr);
  }
  slot->removed = true;
  // The running call (if any) stays at the head until its worker reports back.
  auto queued = mailboxes_.take_waiting(*slot);
  if (!queued.empty()) {
    Error e(ErrorCode::unknown_agent, fmt::format("agent '{}' was deleted before this call ran", id), id,
            slot->class_name);
    for (auto& c : queued) fail(c, e);
  }
  if (!slot->busy) destroy_agent(*slot);
  return true;
}

std::size_t AgentHost::remove_all() {
  Locked lock(*this);
  if (StateStore* store = store_.load()) {
    StateStore::Change c;
    c.kind = StateStore::Change::Kind::delete_all;
    store->submit(std::move(c), nullptr);
  }
  std::vector<std::string> ids;
  for (const auto& [id, _] : agents_) ids.push_back(id);
  for (const auto& id : ids) remove_one(id, /*save=*/false);
  return ids.size();
}

void AgentHost::destroy_agent(AgentSlot& slot) {
  if (!slot.agent) return;
  // The destructor is agent code: it runs on a worker.
  auto agent = std::shared_ptr<Agent>(std::move(slot.agent));
  lifecycle_.submit([agent]() mutable { agent.reset(); });
}

void AgentHost::begin_stop() {
  Locked lock(*this);
  stopping_ = true;
  for (auto& [id, slot] : agents_) {
    for (auto& c : mailboxes_.take_waiting(*slot))
      fail(c, Error(ErrorCode::stopping, "the server is shutting down; this call did not run", id,
                    slot->class_name));
  }
}

}  // namespace agentd::detail
