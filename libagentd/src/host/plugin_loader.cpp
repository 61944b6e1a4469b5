#include "plugin_loader.h"

#include "install_dirs.h"

#include <agentd/error.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>

namespace agentd::detail {

void ClassCatalog::add(AgentClass cls, std::string source) {
  if (auto it = classes_.find(cls.name); it != classes_.end()) {
    throw Error(ErrorCode::plugin_error,
                fmt::format("agent class '{}' from {} is already registered by {}; class names "
                            "must be unique across the loaded plugins",
                            cls.name, source, it->second.source));
  }
  std::string name = cls.name;
  classes_.emplace(std::move(name), Entry{std::move(cls), std::move(source)});
}

const AgentClass* ClassCatalog::find(const std::string& name) const {
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : &it->second.cls;
}

std::vector<std::string> ClassCatalog::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : classes_) out.push_back(n);
  return out;
}

PluginLoader::~PluginLoader() {
  if (python_stop_ != nullptr) python_stop_();
  for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) ::dlclose(*it);
}

void PluginLoader::load(const std::string& path, ClassCatalog& catalog) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(ErrorCode::plugin_error, fmt::format("plugin {}: no such file", path));
  // dlopen searches the library path for names without a slash; plugins are given as paths.
  std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = ::dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error(ErrorCode::plugin_error,
                fmt::format("plugin {}: cannot load: {}", path, why ? why : "unknown dlopen error"));
  }
  using Entry = const PluginTable* (*)();
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "agentd_plugin_table_v1"));
  if (entry == nullptr) {
    ::dlclose(handle);
    throw Error(ErrorCode::plugin_error,
                fmt::format("plugin {}: not an agentd plugin (no agentd_plugin_table_v1 symbol; "
                            "register classes with AGENTD_REGISTER_AGENT)",
                            path));
  }
  const PluginTable* table = entry();
  if (table == nullptr || table->abi_version != AGENTD_ABI_VERSION) {
    int abi = table ? table->abi_version : -1;
    std::string ver = table && table->agentd_version ? table->agentd_version : "?";
    ::dlclose(handle);
    throw Error(ErrorCode::plugin_error,
                fmt::format("plugin {}: built against agentd {} (plugin ABI {}), but this server is "
                            "agentd {} (plugin ABI {}); rebuild the plugin against this version",
                            path, ver, abi, AGENTD_VERSION_STRING, AGENTD_ABI_VERSION));
  }
  if (table->classes.empty()) {
    ::dlclose(handle);
    throw Error(ErrorCode::plugin_error, fmt::format("plugin {}: registers no agent classes", path));
  }
  handles_.push_back(handle);
  paths_.push_back(path);
  for (const auto& cls : table->classes) catalog.add(cls, path);
}

namespace {

// The Python host plugin's entry points (apps/python/host_plugin.cpp defines them; keep the two
// in step). load: imports dirs, calls add(ctx, class, source, factory) per class, or fail(ctx,
// message) once and returns nonzero. stop: ends the host's asyncio thread (agents all gone).
// agentd_python_host_stalls_v1 (optional): the asyncio loop's stall count.
using PythonAdd = void (*)(void* ctx, const char* class_name, const char* source, AgentFactory factory);
using PythonFail = void (*)(void* ctx, const char* message);
using PythonLoad = int (*)(const char* const* dirs, std::size_t n_dirs, void* ctx, PythonAdd add,
                           PythonFail fail);
using PythonStop = void (*)();

struct PythonLoadContext {
  ClassCatalog* catalog;
  std::string error;
};

}  // namespace

void PluginLoader::load_python(const std::vector<std::string>& agent_dirs, ClassCatalog& catalog) {
  namespace fs = std::filesystem;
  if (agent_dirs.empty() || python_stop_ != nullptr) return;
  std::error_code ec;
  for (const auto& d : agent_dirs)
    if (!fs::is_directory(d, ec))
      throw Error(ErrorCode::plugin_error,
                  fmt::format("--agent-dir {}: not a readable directory (it should hold the .py files "
                              "of agent classes deriving from agentd.Agent)",
                              d));
  std::string path;
  if (const char* env = std::getenv("AGENTD_PYTHON_HOST"); env != nullptr && *env != '\0') {
    path = env;
  } else if (auto lib = libagentd_dir(); !lib.empty()) {
    path = (lib / "agentd" / "libagentd_python.so").string();
  }
  if (path.empty() || !fs::exists(path, ec))
    throw Error(ErrorCode::plugin_error,
                fmt::format("--agent-dir needs the Python host plugin, but {} does not exist; build "
                            "agentd with Python (pybind11-dev, python3-dev) or set $AGENTD_PYTHON_HOST",
                            path.empty() ? std::string("libagentd_python.so") : path));
  // Never unloaded: CPython cannot be started again in one process.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error(ErrorCode::plugin_error,
                fmt::format("Python host {}: cannot load: {}", path, why ? why : "unknown dlopen error"));
  }
  auto load = reinterpret_cast<PythonLoad>(::dlsym(handle, "agentd_python_host_load_v1"));
  auto stop = reinterpret_cast<PythonStop>(::dlsym(handle, "agentd_python_host_stop_v1"));
  if (load == nullptr || stop == nullptr)
    throw Error(
        ErrorCode::plugin_error,
        fmt::format("Python host {}: not agentd's Python host (no agentd_python_host_load_v1)", path));
  std::vector<const char*> dirs;
  for (const auto& d : agent_dirs) dirs.push_back(d.c_str());
  PythonLoadContext ctx{&catalog, {}};
  PythonAdd add = [](void* c, const char* name, const char* source, AgentFactory factory) {
    auto* lc = static_cast<PythonLoadContext*>(c);
    if (!lc->error.empty()) return;
    try {
      lc->catalog->add(AgentClass{name, factory}, source);
    } catch (const Error& e) {
      lc->error = e.message();
    }
  };
  PythonFail fail = [](void* c, const char* message) { static_cast<PythonLoadContext*>(c)->error = message; };
  python_stalls_ = reinterpret_cast<std::uint64_t (*)()>(::dlsym(handle, "agentd_python_host_stalls_v1"));
  python_stop_ = stop;  // started (its thread too) even when a module failed: stopped at the end
  if (load(dirs.data(), dirs.size(), &ctx, add, fail) != 0 || !ctx.error.empty())
    throw Error(ErrorCode::plugin_error,
                ctx.error.empty() ? std::string("Python host: loading failed") : ctx.error);
  paths_.push_back(path);
}

std::string PluginLoader::find(const std::string& name, const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (name.find('/') != std::string::npos || fs::exists(name, ec)) return name;
  std::vector<fs::path> places;
  for (const auto& d : dirs) places.emplace_back(d);
  for (auto& d : shipped_plugin_dirs()) places.push_back(std::move(d));
  std::string looked = fs::current_path(ec).string();
  for (const auto& d : places) {
    auto candidate = (d / name).lexically_normal();
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
    looked += ", " + d.lexically_normal().string();
  }
  throw Error(ErrorCode::plugin_error,
              fmt::format("plugin {}: no such file; looked in {}; give its path, or add its "
                          "directory to the plugin dirs (C++ ChildOptions/LocalOptions::plugin_dirs, "
                          "Python plugin_dirs=, as_server --plugin-dir)",
                          name, looked));
}

void PluginLoader::load_dir(const std::string& dir, ClassCatalog& catalog) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::plugin_error, fmt::format("plugin directory {}: not a readable directory", dir));
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".so") files.push_back(it->path().string());
  }
  if (ec) throw Error(ErrorCode::plugin_error, fmt::format("plugin directory {}: {}", dir, ec.message()));
  std::sort(files.begin(), files.end());
  for (const auto& f : files) load(f, catalog);
}

}  // namespace agentd::detail
