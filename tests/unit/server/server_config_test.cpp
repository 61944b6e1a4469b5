// as_server's options: defaults, flags, --help/--version, the --config YAML file (same keys,
// flags win), and every bad-input case naming the option, value or file position.
#include "server_config.h"

#include "server_process.h"
#include "test_names.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

using namespace agentd::test;
using agentd::detail::parse_server_args;
using agentd::detail::ParsedArgs;
using agentd::test::TempDir;

namespace {

ParsedArgs parse(std::vector<std::string> args) {
  args.insert(args.begin(), "as_server");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_server_args(static_cast<int>(argv.size()), argv.data());
}

Error parse_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected a config_error");
  return Error(ErrorCode::internal, "unreachable");
}

}  // namespace

TEST_CASE("defaults match the documented ones", "[server_config]") {
  auto p = parse({});
  CHECK(p.action == ParsedArgs::Action::run);
  const auto& o = p.options;
  CHECK(o.host == "127.0.0.1");
  CHECK(o.port == 12310);
  CHECK(o.max_pool_size == 8192);
  CHECK(o.max_expire_time == 7200);
  CHECK(o.log_level == "info");
  CHECK(o.plugins.empty());
  CHECK(o.server_id.empty());
  CHECK_FALSE(o.stop_on_stdin_eof);
}

TEST_CASE("every option is read from the command line", "[server_config]") {
  auto o = parse({"--host",
                  "0.0.0.0",
                  "--port",
                  "0",
                  "--advertise-address",
                  "h:1",
                  "--model-config-path",
                  "m.yaml",
                  "--plugin",
                  "a.so",
                  "--plugin",
                  "b.so",
                  "--plugin-dir",
                  "d",
                  "--max-workers",
                  "7",
                  "--max-pool-size",
                  "3",
                  "--max-expire-time",
                  "1.5",
                  "--server-id",
                  "s1",
                  "--log-level",
                  "debug",
                  "--shutdown-grace",
                  "2",
                  "--stop-on-stdin-eof",
                  "--auth-token-file",
                  "t",
                  "--peer-token-file",
                  "p",
                  "--allow-unauthenticated"})
               .options;
  CHECK(o.host == "0.0.0.0");
  CHECK(o.port == 0);
  CHECK(o.advertise_address == "h:1");
  CHECK(o.model_config_path == "m.yaml");
  CHECK(o.plugins == std::vector<std::string>{"a.so", "b.so"});
  CHECK(o.plugin_dirs == std::vector<std::string>{"d"});
  CHECK(o.max_workers == 7);
  CHECK(o.max_pool_size == 3);
  CHECK(o.max_expire_time == 1.5);
  CHECK(o.server_id == "s1");
  CHECK(o.log_level == "debug");
  CHECK(o.shutdown_grace == 2);
  CHECK(o.stop_on_stdin_eof);
  CHECK(o.auth_token_file == "t");
  CHECK(o.peer_token_file == "p");
  CHECK(o.allow_unauthenticated);
}

TEST_CASE("protected default: beyond loopback, a token or an explicit opt-out is required",
          "[server_config][security]") {
  // A name that merely starts like a loopback address may resolve to anything.
  for (const char* host :
       {"0.0.0.0", "::", "192.168.1.10", "example.org", "127.example.org", "127.0.0.1.nip.io"}) {
    auto e = parse_error({"--host", host});
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(std::string("--host ") + host) && Contains("--auth-token-file") &&
                                Contains("--allow-unauthenticated"));
    CHECK(parse({"--host", host, "--auth-token-file", "t"}).options.host == host);
    CHECK(parse({"--host", host, "--allow-unauthenticated"}).options.allow_unauthenticated);
  }
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"})
    CHECK(parse({"--host", host}).options.host == host);
  TempDir dir;
  auto yaml = dir.write("c.yaml", "host: 0.0.0.0\nallow-unauthenticated: true\n");
  CHECK(parse({"--config", yaml}).options.allow_unauthenticated);
}

TEST_CASE("TLS options come as a certificate and key pair", "[server_config][security]") {
  auto o = parse({"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--peer-tls-ca",
                  "p.pem"})
               .options;
  CHECK(o.tls_cert == "c.pem");
  CHECK(o.tls_key == "k.pem");
  CHECK(o.tls_client_ca == "ca.pem");
  CHECK(o.peer_tls_ca == "p.pem");
  CHECK_THAT(parse_error({"--tls-cert", "c.pem"}).message(), Contains("--tls-key"));
  CHECK_THAT(parse_error({"--tls-key", "k.pem"}).message(), Contains("--tls-cert"));
  CHECK_THAT(parse_error({"--tls-client-ca", "ca.pem"}).message(), Contains("requires TLS"));
}

TEST_CASE("a Unix socket group needs a Unix socket", "[server_config][security]") {
  auto o = parse({"--unix-socket", "/run/a.sock", "--unix-socket-group", "agentd"}).options;
  CHECK(o.unix_socket == "/run/a.sock");
  CHECK(o.unix_socket_group == "agentd");
  CHECK_THAT(parse_error({"--unix-socket-group", "agentd"}).message(), Contains("--unix-socket PATH"));
}

TEST_CASE("help text explains every option with its default, and version names the version",
          "[server_config]") {
  auto h = parse({"--help"});
  CHECK(h.action == ParsedArgs::Action::help);
  for (const char* opt :
       {"--host", "--port", "--model-config-path", "--plugin", "--plugin-dir", "--max-workers",
        "--max-pool-size", "--max-expire-time", "--server-id", "--log-level", "--config", "--version",
        "--auth-token-file", "--peer-token-file", "--allow-unauthenticated"})
    CHECK_THAT(h.text, Contains(opt));
  CHECK_THAT(h.text, Contains("12310") && Contains("8192") && Contains("7200") && Contains("127.0.0.1"));
  auto v = parse({"--version"});
  CHECK(v.action == ParsedArgs::Action::version);
  CHECK_THAT(v.text, Contains(AGENTD_VERSION_STRING));
}

TEST_CASE("bad options and values are config errors naming them", "[server_config]") {
  auto unknown = parse_error({"--bogus-option"});
  CHECK(unknown.code() == ErrorCode::config_error);
  CHECK_THAT(unknown.message(), Contains("bogus-option"));
  CHECK_THAT(parse_error({"--port", "abc"}).message(), Contains("port"));
  CHECK_THAT(parse_error({"--port", "70000"}).message(), Contains("70000"));
  CHECK_THAT(parse_error({"--port", "-1"}).message(), Contains("port"));
  CHECK_THAT(parse_error({"--log-level", "loud"}).message(), Contains("loud"));
  CHECK_THAT(parse_error({"--max-workers", "0"}).message(), Contains("max-workers"));
  CHECK_THAT(parse_error({"--max-pool-size", "0"}).message(), Contains("max-pool-size"));
  CHECK_THAT(parse_error({"--max-expire-time", "0"}).message(), Contains("max-expire-time"));
  CHECK_THAT(parse_error({"--port"}).message(), Contains("port"));
}

TEST_CASE("a --config file uses the long option names as YAML keys", "[server_config]") {
  TempDir dir;
  auto path = dir.write("server.yaml",
                        "host: 127.0.0.2\n"
                        "port: 0\n"
                        "plugin: [a.so, b.so]\n"
                        "plugin-dir: d\n"
                        "max-pool-size: 5\n"
                        "max-expire-time: 60\n"
                        "server-id: from-file\n"
                        "log-level: warn\n"
                        "stop-on-stdin-eof: true\n");
  auto o = parse({"--config", path}).options;
  CHECK(o.host == "127.0.0.2");
  CHECK(o.port == 0);
  CHECK(o.plugins == std::vector<std::string>{"a.so", "b.so"});
  CHECK(o.plugin_dirs == std::vector<std::string>{"d"});
  CHECK(o.max_pool_size == 5);
  CHECK(o.max_expire_time == 60);
  CHECK(o.server_id == "from-file");
  CHECK(o.log_level == "warn");
  CHECK(o.stop_on_stdin_eof);
  // An empty file is fine.
  CHECK(parse({"--config", dir.write("empty.yaml", "")}).options.port == 12310);
}

TEST_CASE("command-line flags override the --config file", "[server_config]") {
  TempDir dir;
  auto path = dir.write("server.yaml", "port: 12001\nserver-id: from-file\nmax-pool-size: 5\n");
  auto o = parse({"--server-id", "from-flag", "--config", path, "--port", "0"}).options;
  CHECK(o.server_id == "from-flag");
  CHECK(o.port == 0);
  CHECK(o.max_pool_size == 5);  // not on the command line: the file's
}

TEST_CASE("a bad --config names the file and the position", "[server_config]") {
  TempDir dir;
  SECTION("unreadable") {
    auto e = parse_error({"--config", dir.path() + "/missing.yaml"});
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains("missing.yaml") && Contains("cannot read"));
  }
  SECTION("not YAML") {
    auto path = dir.write("bad.yaml", "port: 0\n  bad: 1\nhost: x\n");
    auto e = parse_error({"--config", path});
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Contains(path + ":2:"));
  }
  SECTION("unknown key, with its line") {
    auto path = dir.write("unknown.yaml", "port: 0\n\nbogus-key: 1\n");
    auto e = parse_error({"--config", path});
    CHECK_THAT(e.message(), Contains(path + ":3:") && Contains("bogus-key"));
  }
  SECTION("a key that is not an option") {
    auto path = dir.write("cfg.yaml", "config: other.yaml\n");
    CHECK_THAT(parse_error({"--config", path}).message(), Contains("config"));
  }
  SECTION("not a mapping") {
    auto path = dir.write("list.yaml", "- port\n- 0\n");
    CHECK_THAT(parse_error({"--config", path}).message(), Contains("mapping"));
  }
  SECTION("a bad value in the file") {
    auto path = dir.write("val.yaml", "port: not-a-port\n");
    CHECK_THAT(parse_error({"--config", path}).message(), Contains("port"));
  }
  SECTION("a nested value where a plain one belongs") {
    auto path = dir.write("nested.yaml", "\nhost: {a: 1}\n");
    CHECK_THAT(parse_error({"--config", path}).message(), Contains(path + ":2:") && Contains("host"));
  }
}

TEST_CASE("the pre-login options have defaults and refuse values that would lock clients out",
          "[server][config]") {
  auto defaults = parse({});
  CHECK(defaults.options.login_timeout == 10);
  CHECK(defaults.options.max_unauthenticated_connections == 1024);
  auto set = parse({"--login-timeout", "2.5", "--max-unauthenticated-connections", "64"});
  CHECK(set.options.login_timeout == 2.5);
  CHECK(set.options.max_unauthenticated_connections == 64);
  CHECK_THAT(parse_error({"--login-timeout", "0"}).message(), Contains("--login-timeout 0"));
  CHECK_THAT(parse_error({"--max-unauthenticated-connections", "0"}).message(),
             Contains("--max-unauthenticated-connections"));
}
