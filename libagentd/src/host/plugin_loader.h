// PluginLoader: loads agent plugin shared objects and keeps them loaded for its lifetime.
#pragma once

#include <agentd/agent.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace agentd::detail {

// The agent classes a server can create, by name, with where each came from.
class ClassCatalog {
 public:
  // Throws Error(plugin_error) when name is already registered (naming both sources).
  void add(AgentClass cls, std::string source);
  const AgentClass* find(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  std::size_t size() const { return classes_.size(); }

 private:
  struct Entry {
    AgentClass cls;
    std::string source;
  };
  std::map<std::string, Entry> classes_;
};

class PluginLoader {
 public:
  PluginLoader() = default;
  ~PluginLoader();  // dlcloses the plugins; every agent they created must be gone by then
  PluginLoader(const PluginLoader&) = delete;
  PluginLoader& operator=(const PluginLoader&) = delete;

  // Loads one plugin and adds its classes to catalog. Throws Error(plugin_error) naming the file
  // and the reason: not found, dlopen's message, no agentd_plugin_table_v1, ABI mismatch,
  // no classes, a class name already taken.
  void load(const std::string& path, ClassCatalog& catalog);

  // Loads every *.so in dir (sorted by name). Throws as load() does; an unreadable dir too.
  void load_dir(const std::string& dir, ClassCatalog& catalog);

  // The file to load for a plugin given as name: name itself when it has a '/' or exists, else
  // the first dir/name of dirs (the --plugin-dir directories) and of the plugin directories
  // shipped beside libagentd (install_dirs.h), so "libweb_agent.so" works as the README writes
  // it. Throws Error(plugin_error) naming every place it looked and what to do.
  static std::string find(const std::string& name, const std::vector<std::string>& dirs);

  // Hosts the agent classes written in Python in agent_dirs (as_server --agent-dir): loads the
  // Python host plugin (libagentd_python.so: <libdir>/agentd/ beside libagentd, in a build tree
  // and an install alike; $AGENTD_PYTHON_HOST overrides), which embeds CPython, imports every
  // DIR/*.py and reports each class deriving from agentd.Agent; each is added to catalog with
  // its file as the source. Throws Error(plugin_error) naming the file and line of a module that
  // fails to import, a class defined twice, or a missing plugin. Once only.
  void load_python(const std::vector<std::string>& agent_dirs, ClassCatalog& catalog);

  const std::vector<std::string>& loaded() const { return paths_; }

  // Any thread: the Python host's asyncio loop stalls so far (-1 without the Python host).
  std::int64_t python_loop_stalls() const {
    return python_stalls_ != nullptr ? static_cast<std::int64_t>(python_stalls_()) : -1;
  }

 private:
  // The Python host's stop (its asyncio thread), run before the plugins are closed, and its
  // stall counter.
  void (*python_stop_)() = nullptr;
  std::uint64_t (*python_stalls_)() = nullptr;
  std::vector<void*> handles_;
  std::vector<std::string> paths_;
};

}  // namespace agentd::detail
