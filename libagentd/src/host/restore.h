// Restoring an AgentHost from its state store at start (as_server --state-dir): the host's
// policy over what the store holds.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace kj {
class WaitScope;
}

namespace agentd::detail {

class AgentHost;
class ClassCatalog;
class StateStore;

struct RestoreOptions {
  std::string server_id;        // saved in the store
  std::size_t max_results = 0;  // finished results kept (the result pool's limits)
  std::chrono::milliseconds max_age{0};
  bool drop_missing_classes = false;  // delete agents of classes no plugin provides
  std::string state_dir;              // for the log line
};

// Loads store into host, on the loop thread, before serving: attaches the store to the host
// (set_store), brings every agent back through its constructor (same id, name, args), its
// memory and load_state(), and its finished results, and waits on wait_scope until all agents
// are made. Agents of classes catalog lacks refuse the start unless o.drop_missing_classes,
// which deletes them from the store. Throws Error(config_error) naming the agents when the
// start is refused or some could not be restored. All borrowed.
void restore_from_store(AgentHost& host, StateStore& store, const ClassCatalog& catalog,
                        kj::WaitScope& wait_scope, const RestoreOptions& o);

}  // namespace agentd::detail
