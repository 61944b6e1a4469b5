// Cluster membership (cluster/membership.h) without servers: server specs and address lists,
// dns:NAME:PORT resolved to one member per address (localhost), cluster files (the three
// spellings of a server, paths relative to the file, the token from token_file, the placement
// policy) and the errors that name the file and the entry. Placement itself (which member gets
// the next agent) lives in cluster.cpp behind live Clients and is tested with real servers in
// tests/cluster/cluster_test.cpp.
#include "membership.h"

#include "error_of.h"
#include "server_process.h"  // TempDir
#include "test_names.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace agentd::test;
using agentd::Placement;
namespace cluster = agentd::cluster;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> texts(const std::vector<cluster::Address>& addresses) {
  std::vector<std::string> out;
  for (const auto& a : addresses) out.push_back(a.text());
  return out;
}

}  // namespace

TEST_CASE("an address list is split only when every piece is HOST:PORT or dns:NAME:PORT",
          "[cluster][membership]") {
  CHECK(cluster::split_spec_list("127.0.0.1:7000,[::1]:7001,dns:localhost:7002") ==
        std::vector<std::string>{"127.0.0.1:7000", "[::1]:7001", "dns:localhost:7002"});
  CHECK(cluster::split_spec_list("node-a:1") == std::vector<std::string>{"node-a:1"});
  // Anything else is not a list of servers (Cluster::open then takes it for a cluster file).
  CHECK_FALSE(cluster::split_spec_list("cluster.yaml"));
  CHECK_FALSE(cluster::split_spec_list("a:1,b"));
  CHECK_FALSE(cluster::split_spec_list("a:1,"));
  CHECK_FALSE(cluster::split_spec_list(""));
  CHECK_FALSE(cluster::split_spec_list("a:0"));
  CHECK_FALSE(cluster::split_spec_list("a:65536"));
  CHECK_FALSE(cluster::split_spec_list(":7000"));
  CHECK_FALSE(cluster::split_spec_list("dns::7000"));
}

TEST_CASE("resolve: addresses as given, names to every address they have, each member once",
          "[cluster][membership]") {
  auto listed = cluster::resolve({"127.0.0.1:7000", "[::1]:7001", "node-b:7002"});
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].endpoint.host == "127.0.0.1");
  CHECK(listed[0].endpoint.port == 7000);
  CHECK(listed[0].source == "127.0.0.1:7000");
  CHECK(listed[1].endpoint.host == "::1");  // kept without brackets, written with them
  CHECK(listed[1].endpoint.port == 7001);
  CHECK(listed[1].text() == "[::1]:7001");
  CHECK(listed[2].text() == "node-b:7002");  // a plain host name is the client's to resolve

  // dns:NAME:PORT: one member per address of the name, IPv4 first, each naming the spec.
  auto named = cluster::resolve({"dns:localhost:7100"});
  REQUIRE_FALSE(named.empty());
  CHECK(named[0].text() == "127.0.0.1:7100");
  bool seen_v6 = false;
  for (const auto& a : named) {
    CHECK(a.source == "dns:localhost:7100");
    CHECK(a.endpoint.port == 7100);
    if (a.endpoint.host.find(':') != std::string::npos) {
      seen_v6 = true;
    } else {
      CHECK_FALSE(seen_v6);  // no IPv4 address after an IPv6 one
    }
  }

  // The same server named twice is one member, at its first mention.
  auto twice = cluster::resolve({"dns:localhost:7100", "127.0.0.1:7100", "127.0.0.1:7101", "127.0.0.1:7101"});
  const auto members = texts(twice);
  CHECK(members.size() == named.size() + 1);
  CHECK(std::count(members.begin(), members.end(), "127.0.0.1:7100") == 1);
  CHECK(twice[0].source == "dns:localhost:7100");
  CHECK(twice.back().text() == "127.0.0.1:7101");
}

TEST_CASE("resolve refuses a spec that does not parse or a name that does not resolve, saying which",
          "[cluster][membership]") {
  auto bad = error_of([] { cluster::resolve({"127.0.0.1:7000", "no-port"}); });
  CHECK(bad.code() == ErrorCode::bad_args);
  CHECK_THAT(bad.message(), Contains("\"no-port\"") && Contains("HOST:PORT or dns:NAME:PORT"));

  auto unknown = error_of([] { cluster::resolve({"dns:no-such-host.invalid:7000"}); });
  CHECK(unknown.code() == ErrorCode::bad_args);
  CHECK_THAT(unknown.message(), Contains("dns:no-such-host.invalid:7000") && Contains("does not resolve") &&
                                    Contains("list the servers' addresses instead"));
}

TEST_CASE("placement policies by name", "[cluster][membership]") {
  CHECK(cluster::placement_from_name("round_robin") == Placement::round_robin);
  CHECK(cluster::placement_from_name("least_loaded") == Placement::least_loaded);
  CHECK_FALSE(cluster::placement_from_name("random"));
  CHECK_FALSE(cluster::placement_from_name("Round_Robin"));
  CHECK_FALSE(cluster::placement_from_name(""));
}

TEST_CASE(
    "a cluster file: three spellings of a server, paths from the file's folder, the token "
    "from token_file",
    "[cluster][membership]") {
  TempDir tmp;
  fs::create_directory(tmp.path() + "/conf");
  const std::string token = tmp.write("conf/token", "# the cluster's token\nsecret-one\nsecret-two\n");
  REQUIRE(::chmod(token.c_str(), 0600) == 0);
  const std::string file = tmp.write("conf/cluster.yaml", R"(servers:
  - 127.0.0.1:7000
  - {host: 127.0.0.2, port: 7001}
  - {dns: "localhost:7002"}
token_file: token
tls_ca: certs/../ca.pem
tls_cert: /etc/agentd/client.pem
placement: least_loaded
)");
  auto f = cluster::read_cluster_file(file);
  CHECK(f.servers == std::vector<std::string>{"127.0.0.1:7000", "127.0.0.2:7001", "dns:localhost:7002"});
  CHECK(f.token == "secret-one");  // the first token of the file
  CHECK(f.tls_ca == tmp.path() + "/conf/ca.pem");
  CHECK(f.tls_cert == "/etc/agentd/client.pem");
  CHECK(f.tls_key.empty());
  CHECK(f.placement == Placement::least_loaded);

  // Only servers is required.
  auto minimal = cluster::read_cluster_file(tmp.write("min.yaml", "servers: [node:1]\n"));
  CHECK(minimal.servers == std::vector<std::string>{"node:1"});
  CHECK(minimal.token.empty());
  CHECK_FALSE(minimal.placement);
}

TEST_CASE("a cluster file that cannot be used is refused naming the file and the entry",
          "[cluster][membership]") {
  TempDir tmp;
  auto refused = [&](const std::string& text) {
    const std::string path = tmp.write("bad.yaml", text);
    Error e = error_of([&] { cluster::read_cluster_file(path); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Catch::StartsWith("cluster file " + path));
    return e.message();
  };
  CHECK_THAT(refused("- 127.0.0.1:7000\n"), Contains("expected a mapping with a servers: list"));
  CHECK_THAT(refused("token_file: t\n"), Contains("servers: must be a list"));
  CHECK_THAT(refused("servers: [a:1, {host: b}]\n"),
             Contains("servers[1]") && Contains("{host: H, port: P}"));
  CHECK_THAT(refused("servers: [a:1, b:2, {host: c, port: many}]\n"), Contains("servers[2]"));
  CHECK_THAT(refused("servers: [a:1, 'b:99999']\n"), Contains("servers[1]") && Contains("b:99999"));
  CHECK_THAT(refused("servers: [a:1]\ntls_ca: [x, y]\n"), Contains("tls_ca: expected a path"));
  CHECK_THAT(refused("servers: [a:1]\nplacement: {x: 1}\n"), Contains("placement"));

  // A token file others could read is refused as as_server refuses it, naming the entry.
  const std::string token = tmp.write("token", "secret\n");
  REQUIRE(::chmod(token.c_str(), 0644) == 0);
  const std::string msg = refused("servers: [a:1]\ntoken_file: token\n");
  CHECK_THAT(msg, Contains("token_file " + token) && Contains("chmod 600") && !Contains("secret\n"));
  CHECK_THAT(refused("servers: [a:1]\ntoken_file: missing\n"),
             Contains(tmp.path() + "/missing") && Contains("cannot read the token file"));

  Error none = error_of([&] { cluster::read_cluster_file(tmp.path() + "/none.yaml"); });
  CHECK(none.code() == ErrorCode::config_error);
  CHECK_THAT(none.message(), Contains("no such file") && Contains("HOST:PORT"));
}
