// PluginLoader / ClassCatalog: good plugins register their classes; every broken plugin is
// refused with a plugin_error naming the file and the reason.
#include "plugin_loader.h"

#include "server_process.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

#include <algorithm>

using namespace agentd::test;
using agentd::detail::ClassCatalog;
using agentd::detail::PluginLoader;
using agentd::test::TempDir;

namespace {

Error load_error(const std::string& path) {
  ClassCatalog catalog;
  PluginLoader loader;
  try {
    loader.load(path, catalog);
  } catch (const Error& e) {
    CHECK(catalog.size() == 0);
    return e;
  }
  FAIL("expected a plugin_error for " << path);
  return Error(ErrorCode::internal, "unreachable");
}

class Dummy : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override { return x; }
};

}  // namespace

TEST_CASE("a plugin's classes land in the catalog", "[plugin_loader]") {
  ClassCatalog catalog;
  PluginLoader loader;
  loader.load(agentd::test::echo_plugin(), catalog);
  auto names = catalog.names();
  CHECK(std::is_sorted(names.begin(), names.end()));
  for (const char* cls : {"EchoAgent", "FlakyAgent", "TrailAgent"})
    CHECK(std::count(names.begin(), names.end(), cls) == 1);
  CHECK(catalog.find("TextSizeAgent") == nullptr);  // another plugin's
  REQUIRE(catalog.find("EchoAgent") != nullptr);
  CHECK(catalog.find("EchoAgent")->factory != nullptr);
  CHECK(catalog.find("Nope") == nullptr);
  CHECK(loader.loaded() == std::vector<std::string>{agentd::test::echo_plugin()});
  // A second plugin adds its own classes.
  loader.load(agentd::test::test_agents_plugin(), catalog);
  CHECK(catalog.find("BigTextAgent") != nullptr);
  CHECK(catalog.find("EchoAgent") != nullptr);
}

TEST_CASE("a plugin directory loads every .so in it", "[plugin_loader]") {
  ClassCatalog catalog;
  PluginLoader loader;
  loader.load_dir(AGENTD_TEST_PLUGIN_DIR, catalog);
  CHECK(catalog.find("EchoAgent") != nullptr);
  CHECK(catalog.find("WebAgent") != nullptr);
  CHECK(loader.loaded().size() >= 2);
}

TEST_CASE("broken plugins are refused, naming the file and why", "[plugin_loader]") {
  TempDir dir;
  SECTION("missing") {
    auto e = load_error(dir.path() + "/libnothere.so");
    CHECK(e.code() == ErrorCode::plugin_error);
    CHECK_THAT(e.message(), Contains("libnothere.so") && Contains("no such file"));
  }
  SECTION("not a shared object (dlopen fails)") {
    auto path = dir.write("libgarbage.so", "this is not an ELF file\n");
    auto e = load_error(path);
    CHECK(e.code() == ErrorCode::plugin_error);
    CHECK_THAT(e.message(), Contains(path) && Contains("cannot load"));
  }
  SECTION("a shared object without the agentd entry point") {
    auto e = load_error(AGENTD_NOT_A_PLUGIN);
    CHECK_THAT(e.message(), Contains(AGENTD_NOT_A_PLUGIN) && Contains("not an agentd plugin"));
  }
  SECTION("built against another plugin ABI") {
    auto e = load_error(AGENTD_ABI_MISMATCH_PLUGIN);
    CHECK_THAT(e.message(), Contains(AGENTD_ABI_MISMATCH_PLUGIN) && Contains("ABI") && Contains("9.9.9") &&
                                Contains("rebuild"));
  }
  SECTION("no classes") {
    auto e = load_error(AGENTD_EMPTY_PLUGIN);
    CHECK_THAT(e.message(), Contains(AGENTD_EMPTY_PLUGIN) && Contains("no agent classes"));
  }
  SECTION("a directory that is not one") {
    ClassCatalog catalog;
    PluginLoader loader;
    try {
      loader.load_dir(dir.path() + "/nodir", catalog);
      FAIL("expected plugin_error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::plugin_error);
      CHECK_THAT(e.message(), Contains("nodir"));
    }
  }
}

TEST_CASE("a class name registered twice is refused, naming both sources", "[plugin_loader]") {
  ClassCatalog catalog;
  catalog.add(agentd::agent_class<Dummy>("EchoAgent"), "the calling program");
  PluginLoader loader;
  try {
    loader.load(agentd::test::echo_plugin(), catalog);
    FAIL("expected plugin_error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::plugin_error);
    CHECK_THAT(e.message(), Contains("EchoAgent") && Contains("the calling program") &&
                                Contains(agentd::test::echo_plugin()));
  }
}
