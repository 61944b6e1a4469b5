// as_server's command line against the real binary: --help, --version, bad options and config
// files, --config keys, flags over the file, a busy port, and plugins that fail to load. Every
// failed start exits non-zero with a clear message, prints no ready line, and leaves nothing
// listening.
#include "server_process.h"

#include <agentd/version.h>

#include <catch2/catch.hpp>

#include <algorithm>

using namespace agentd::test;
using Catch::Matchers::Contains;

namespace {

// A failed start: the exit code, and no ready line, nothing left listening on the port.
void check_failed_start(const ExitResult& r, int code, std::uint16_t port) {
  CHECK(r.exit_code == code);
  CHECK_THAT(r.out, !Contains("ready"));
  CHECK_THAT(r.err, Contains("as_server:"));
  CHECK_FALSE(can_connect(port));
}

}  // namespace

TEST_CASE("as_server --help explains the options with their defaults", "[options]") {
  auto r = run_as_server({"--help"});
  CHECK(r.exit_code == 0);
  for (const char* opt :
       {"--host", "--port", "--model-config-path", "--plugin ", "--plugin-dir", "--max-workers",
        "--max-pool-size", "--max-expire-time", "--server-id", "--log-level", "--config", "--version"})
    CHECK_THAT(r.out, Contains(opt));
  CHECK_THAT(r.out, Contains("12310") && Contains("8192") && Contains("7200"));
  CHECK_THAT(r.out, Contains("as_server ready: listening on"));
}

TEST_CASE("as_server --version prints the version", "[options]") {
  auto r = run_as_server({"--version"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains(AGENTD_VERSION_STRING));
}

TEST_CASE("an unknown option is refused with exit 2", "[options]") {
  auto port = unused_port();
  auto r = run_as_server({"--port", std::to_string(port), "--no-such-option"});
  check_failed_start(r, 2, port);
  CHECK_THAT(r.err, Contains("no-such-option"));
}

TEST_CASE("a bad option value is refused with exit 2", "[options]") {
  auto r = run_as_server({"--port", "99999"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("99999"));
  auto r2 = run_as_server({"--log-level", "chatty"});
  CHECK(r2.exit_code == 2);
  CHECK_THAT(r2.err, Contains("chatty"));
}

TEST_CASE("a --config that is not valid YAML is refused naming file:line", "[options]") {
  TempDir dir;
  auto port = unused_port();
  auto path = dir.write("bad.yaml", "port: " + std::to_string(port) + "\n  host: 127.0.0.1\n");
  auto r = run_as_server({"--config", path});
  check_failed_start(r, 2, port);
  CHECK_THAT(r.err, Contains(path + ":2:"));
}

TEST_CASE("an unknown key in --config is refused naming file:line and the key", "[options]") {
  TempDir dir;
  auto port = unused_port();
  auto path = dir.write("unknown.yaml", "port: " + std::to_string(port) + "\nprot: 1\n");
  auto r = run_as_server({"--config", path});
  check_failed_start(r, 2, port);
  CHECK_THAT(r.err, Contains(path + ":2:") && Contains("prot"));
}

TEST_CASE("a bad value in --config is refused naming file:line, the key and the value", "[options]") {
  TempDir dir;
  auto path = dir.write("values.yaml", "log-level: warn\nport: twelve\n");
  auto r = run_as_server({"--config", path});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.out, !Contains("ready"));
  CHECK_THAT(r.err, Contains(path + ":2:7") && Contains("twelve") && Contains("port"));
}

TEST_CASE("an unreadable --config is refused naming the file", "[options]") {
  TempDir dir;
  auto r = run_as_server({"--config", dir.path() + "/absent.yaml"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("absent.yaml"));
}

TEST_CASE("a --config file sets options by their long names", "[options]") {
  TempDir dir;
  auto path = dir.write("server.yaml",
                        "port: 0\n"
                        "server-id: from-file\n"
                        "plugin:\n  - " +
                            echo_plugin() +
                            "\n"
                            "max-pool-size: 17\n"
                            "max-expire-time: 99\n"
                            "log-level: warn\n");
  auto s = ServerProcess::start({"--config", path});
  CHECK(s->server_id() == "from-file");
  auto c = s->connect();
  auto info = c.info();
  CHECK(info.server_id == "from-file");
  CHECK(info.max_pool_size == 17);
  CHECK(info.max_expire_seconds == 99);
  CHECK(std::count(info.classes.begin(), info.classes.end(), "EchoAgent") == 1);
  CHECK(std::count(info.classes.begin(), info.classes.end(), "TextSizeAgent") == 0);
}

TEST_CASE("command-line flags override the --config file", "[options]") {
  TempDir dir;
  auto path = dir.write("server.yaml",
                        "port: 1\nserver-id: from-file\nmax-pool-size: 17\n"
                        "log-level: warn\n");
  auto s = ServerProcess::start({"--config", path, "--port", "0", "--server-id", "from-flag"});
  CHECK(s->server_id() == "from-flag");
  CHECK(s->port() != 1);
  auto info = s->connect().info();
  CHECK(info.server_id == "from-flag");
  CHECK(info.max_pool_size == 17);
}

TEST_CASE("a busy port is refused with exit 3, never a different port", "[options]") {
  auto first = ServerProcess::start(standard_args());
  auto r = run_as_server({"--port", std::to_string(first->port()), "--log-level", "warn"});
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.out, !Contains("ready"));
  CHECK_THAT(r.err, Contains(std::to_string(first->port())) && Contains("--port"));
  // The first server still owns the port and answers.
  auto c = first->connect();
  CHECK(c.server_id() == first->server_id());
}

TEST_CASE("a plugin that cannot be loaded is refused with exit 4 naming the file", "[options]") {
  TempDir dir;
  auto port = unused_port();
  std::vector<std::string> base{"--port", std::to_string(port), "--plugin", echo_plugin()};
  SECTION("missing file") {
    auto missing = dir.path() + "/libmissing_agent.so";
    base.insert(base.end(), {"--plugin", missing});
    auto r = run_as_server(base);
    check_failed_start(r, 4, port);
    CHECK_THAT(r.err, Contains(missing) && Contains("no such file"));
  }
  SECTION("not a shared object") {
    auto junk = dir.write("libjunk.so", "not an ELF file");
    base.insert(base.end(), {"--plugin", junk});
    auto r = run_as_server(base);
    check_failed_start(r, 4, port);
    CHECK_THAT(r.err, Contains(junk) && Contains("cannot load"));
  }
  SECTION("a shared object that is not a plugin") {
    base.insert(base.end(), {"--plugin", AGENTD_NOT_A_PLUGIN});
    auto r = run_as_server(base);
    check_failed_start(r, 4, port);
    CHECK_THAT(r.err, Contains(AGENTD_NOT_A_PLUGIN) && Contains("not an agentd plugin"));
  }
  SECTION("a plugin built for another ABI") {
    base.insert(base.end(), {"--plugin", AGENTD_ABI_MISMATCH_PLUGIN});
    auto r = run_as_server(base);
    check_failed_start(r, 4, port);
    CHECK_THAT(r.err, Contains(AGENTD_ABI_MISMATCH_PLUGIN) && Contains("ABI"));
  }
  SECTION("a plugin directory that does not exist") {
    base.insert(base.end(), {"--plugin-dir", dir.path() + "/nodir"});
    auto r = run_as_server(base);
    check_failed_start(r, 4, port);
    CHECK_THAT(r.err, Contains("nodir"));
  }
  SECTION("the same plugin twice") {
    base.insert(base.end(), {"--plugin", echo_plugin()});
    auto r = run_as_server(base);
    check_failed_start(r, 4, port);
    CHECK_THAT(r.err, Contains("EchoAgent") && Contains("already registered"));
  }
}

TEST_CASE("a --model-config-path that cannot be read is refused", "[options]") {
  TempDir dir;
  auto port = unused_port();
  auto r =
      run_as_server({"--port", std::to_string(port), "--model-config-path", dir.path() + "/nomodels.yaml"});
  check_failed_start(r, 2, port);
  CHECK_THAT(r.err, Contains("nomodels.yaml"));
}
