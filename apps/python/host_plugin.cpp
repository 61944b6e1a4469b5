// libagentd_python.so: the Python host plugin. as_server loads it for --agent-dir (PluginLoader::
// load_python, libagentd/src/host/plugin_loader.cpp, declares the two entry points below; keep
// them in step). It starts CPython in the server's process, imports the agentd package (whose
// extension module holds the hosting code: hosting.h) and hands the server one agent class per
// Python class. libagentd itself never loads CPython: only this plugin does, and only when asked.
#include "hosting.h"

#include <pybind11/embed.h>

#include <dlfcn.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using PythonAdd = void (*)(void* ctx, const char* class_name, const char* source,
                           agentd::AgentFactory factory);
using PythonFail = void (*)(void* ctx, const char* message);

const agentd::python::HostApi* g_api = nullptr;

// This plugin's folder: <libdir>/agentd/ installed, build/lib/agentd/ in a build tree.
std::filesystem::path plugin_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&plugin_dir), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  return std::filesystem::weakly_canonical(info.dli_fname, ec).parent_path();
}

// Extension modules (agentd's own, and any an agent imports) expect libpython's symbols to be
// global; this plugin was loaded RTLD_LOCAL, so its libpython is made global here.
void make_libpython_global() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&Py_InitializeEx), &info) != 0 && info.dli_fname != nullptr)
    ::dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

// Where the agentd package is, when it is not on Python's own path: the build tree's python/
// folder, or the install's (AGENTD_PYTHON_FROM_PLUGIN: its path relative to this plugin).
void add_package_path() {
  auto dir = plugin_dir();
  if (dir.empty()) return;
  py::list path = py::module_::import("sys").attr("path");
  for (const auto& rel : {std::string("../../python"), std::string(AGENTD_PYTHON_FROM_PLUGIN)}) {
    auto candidate = (dir / rel).lexically_normal();
    std::error_code ec;
    if (std::filesystem::exists(candidate / "agentd" / "__init__.py", ec)) {
      path.insert(0, candidate.string());
      return;
    }
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int agentd_python_host_load_v1(const char* const* dirs,
                                                                                 std::size_t n_dirs,
                                                                                 void* ctx, PythonAdd add,
                                                                                 PythonFail fail) {
  if (g_api != nullptr) {
    fail(ctx, "Python host: loaded once per server");
    return 1;
  }
  make_libpython_global();
  // No Python signal handlers: as_server handles its signals itself.
  py::initialize_interpreter(false, 0, nullptr, false);
  int rc = 0;
  try {
    py::module_::import("sys").attr("argv") = py::make_tuple("as_server");
    add_package_path();
    py::module_ ext = py::module_::import("agentd._agentd");
    g_api = ext.attr("_host_api").cast<py::capsule>().get_pointer<agentd::python::HostApi>();
    std::vector<std::string> list(dirs, dirs + n_dirs);
    for (const auto& c : g_api->load(list)) add(ctx, c.name.c_str(), c.source.c_str(), g_api->factory);
  } catch (py::error_already_set& e) {
    fail(ctx, ("Python host: " + std::string(e.what())).c_str());
    rc = 1;
  } catch (const std::exception& e) {
    fail(ctx, e.what());
    rc = 1;
  }
  // Python code runs on the host's threads from now on, each taking the GIL when it needs it.
  PyEval_SaveThread();
  return rc;
}

extern "C" __attribute__((visibility("default"))) void agentd_python_host_stop_v1() {
  if (g_api != nullptr) g_api->stop();
}

extern "C" __attribute__((visibility("default"))) std::uint64_t agentd_python_host_stalls_v1() {
  return g_api != nullptr ? g_api->stalls() : 0;
}
