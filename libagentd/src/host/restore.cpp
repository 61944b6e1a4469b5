#include "restore.h"

#include "agent_host.h"
#include "plugin_loader.h"
#include "state_store.h"

#include <kj/async.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <optional>
#include <vector>

namespace agentd::detail {

void restore_from_store(AgentHost& host, StateStore& store, const ClassCatalog& catalog,
                        kj::WaitScope& wait_scope, const RestoreOptions& o) {
  store.set_server_id(o.server_id);
  auto contents = store.load(o.max_results, o.max_age);
  // Agents of classes no plugin provides: refuse to start (naming them), or drop them.
  std::vector<std::string> missing;
  std::string listed;
  for (const auto& a : contents.agents) {
    if (catalog.find(a.class_name) != nullptr) continue;
    missing.push_back(a.id);
    if (missing.size() <= 20)
      listed += fmt::format("{}{} ({})", listed.empty() ? "" : ", ", a.id, a.class_name);
  }
  if (missing.size() > 20) listed += fmt::format(" and {} more", missing.size() - 20);
  if (!missing.empty()) {
    if (!o.drop_missing_classes)
      throw Error(
          ErrorCode::config_error,
          fmt::format("{}: {} agent(s) of classes no loaded plugin provides: {}; load "
                      "their plugins (--plugin, --plugin-dir) or, for classes written in Python, their "
                      "folders (--agent-dir), or start with "
                      "--drop-missing-classes to delete them",
                      store.file(), missing.size(), listed));
    spdlog::warn(
        "--drop-missing-classes: deleting {} agent(s) of classes no loaded plugin "
        "provides from {}: {}",
        missing.size(), store.file(), listed);
    store.drop_agents(missing);
  }
  host.set_store(&store);  // restored agents learn what the store holds of them
  // Every agent comes back through its constructor (same id, name, args) on the workers, then
  // gets its memory and load_state(); the server is ready when all have.
  std::size_t left = 0;
  std::vector<std::string> failures;
  auto all = kj::newPromiseAndFulfiller<void>();
  auto finished = [&](const std::string& id, std::optional<Error> e) {
    if (e && failures.size() < 20) failures.push_back(fmt::format("{}: {}", id, e->message()));
    if (e && failures.size() == 20) failures.push_back("...");
    if (--left == 0) all.fulfiller->fulfill();
  };
  std::size_t restored = 0;
  for (auto& a : contents.agents) {
    if (catalog.find(a.class_name) == nullptr) continue;
    auto seed = std::make_shared<AgentSeed>();
    seed->state = std::move(a.state);
    seed->memory = std::move(a.memory);
    seed->persist = false;
    ++left;
    ++restored;
    std::string id = a.id;
    auto made = host.create(
        a.class_name, a.name, std::move(a.args), a.id,
        [&finished, id](std::variant<AgentInfoRow, Error> r) {
          finished(
              id, std::holds_alternative<Error>(r) ? std::optional<Error>(std::get<Error>(r)) : std::nullopt);
        },
        seed);
    if (auto* e = std::get_if<Error>(&made)) finished(id, *e);
  }
  if (left > 0) all.promise.wait(wait_scope);
  if (!failures.empty()) {
    std::string list;
    for (const auto& f : failures) list += "\n  " + f;
    throw Error(ErrorCode::config_error,
                fmt::format("{}: {} agent(s) could not be restored (their constructor or "
                            "load_state() failed):{}",
                            store.file(), failures.size(), list));
  }
  for (auto& r : contents.results) host.restore_result(r.call_id, r.agent_id, std::move(r.outcome));
  host.forget_until(contents.forgotten_until_unix_ms);
  spdlog::info("state dir {}: restored {} agent(s) and {} finished result(s)", o.state_dir, restored,
               contents.results.size());
}

}  // namespace agentd::detail
