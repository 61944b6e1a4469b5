// Endpoint: the one parser and formatter of "host:port", "[v6]:port" and "unix:PATH"; the ready
// line as_server prints when it listens.
#include "endpoint.h"

#include "ready_line.h"

#include <agentd/error.h>

#include <catch2/catch.hpp>

using agentd::net::address_part;
using agentd::net::Endpoint;
using agentd::net::parse_ready_line;

TEST_CASE("endpoints parse and format back to the same text", "[net][endpoint]") {
  for (const char* text : {"127.0.0.1:12310", "agents.example:1", "[::1]:5", "[fe80::1%eth0]:65535",
                           "unix:/run/agentd/agentd.sock", "unix:relative.sock"}) {
    INFO(text);
    auto e = Endpoint::try_parse(text);
    REQUIRE(e);
    CHECK(e->text() == text);
    CHECK(Endpoint::parse(e->text()) == *e);
  }
  auto v4 = Endpoint::parse("127.0.0.1:12310");
  CHECK(v4.host == "127.0.0.1");
  CHECK(v4.port == 12310);
  CHECK_FALSE(v4.is_unix());
  auto v6 = Endpoint::parse("[::1]:5");
  CHECK(v6.host == "::1");           // no brackets in the host...
  CHECK(v6.host_text() == "[::1]");  // ...but where an address is written
  CHECK(v6.port == 5);
  auto sock = Endpoint::parse("unix:/tmp/x.sock");
  CHECK(sock.is_unix());
  CHECK(sock.path == "/tmp/x.sock");
  CHECK(sock.port == 0);
  // An IPv6 address without brackets: the port follows the last colon; written with brackets.
  auto bare = Endpoint::parse("::1:5");
  CHECK(bare.host == "::1");
  CHECK(bare.text() == "[::1]:5");
}

TEST_CASE("a host and a port make an endpoint as Client::connect takes them", "[net][endpoint]") {
  CHECK(Endpoint::from("127.0.0.1", 80).text() == "127.0.0.1:80");
  CHECK(Endpoint::from("[::1]", 80).host == "::1");
  CHECK(Endpoint::from("::1", 80).text() == "[::1]:80");
  CHECK(Endpoint::from("unix:/tmp/s", 0).path == "/tmp/s");
  CHECK_THROWS_AS(Endpoint::from("", 80), agentd::Error);
  CHECK_THROWS_AS(Endpoint::from("host", 0), agentd::Error);
  // A host named unix would be written as unix:PORT, a socket path: refused, saying so.
  CHECK_THROWS_WITH(Endpoint::from("unix", 8), Catch::Matchers::Contains("cannot be told from unix:PATH"));
}

TEST_CASE("anything else is refused, saying why", "[net][endpoint]") {
  for (const char* bad : {"", "local", "host:", ":80", "host:0", "host:65536", "host:12x", "host:-1",
                          "[::1:5", "[]:5", "unix:", "[unix]:8", "[localhost]:80"}) {
    INFO(bad);
    CHECK_FALSE(Endpoint::try_parse(bad));
    try {
      Endpoint::parse(bad);
      FAIL("expected an error");
    } catch (const agentd::Error& e) {
      CHECK(e.code() == agentd::ErrorCode::bad_args);
      CHECK_THAT(e.message(), Catch::Matchers::Contains("expected HOST:PORT, [IPV6]:PORT or unix:PATH"));
      CHECK_THAT(e.message(), Catch::Matchers::Contains(std::string("\"") + bad + "\""));
    }
  }
  try {
    Endpoint::parse("host:65536");
  } catch (const agentd::Error& e) {
    CHECK_THAT(e.message(), Catch::Matchers::Contains("not in 1..65535"));
  }
}

TEST_CASE("the address part of a peer is what the login throttle counts by", "[net][endpoint]") {
  CHECK(address_part("1.2.3.4:5678") == "1.2.3.4");
  CHECK(address_part("[::1]:5678") == "[::1]");
  CHECK(address_part("unix:/run/x.sock") == "unix");
  CHECK(address_part("unix") == "unix");
  CHECK(address_part("unknown") == "unknown");
}

TEST_CASE("the ready line gives the endpoint and the server id", "[net][ready_line]") {
  auto r = parse_ready_line("as_server ready: listening on 127.0.0.1:40123 server_id=abc123 pid=77");
  REQUIRE(r);
  CHECK(r->endpoint.host == "127.0.0.1");
  CHECK(r->endpoint.port == 40123);
  CHECK(r->server_id == "abc123");

  r = parse_ready_line("as_server ready: listening on ::1:5 server_id=x pid=1");
  REQUIRE(r);
  CHECK(r->endpoint.host == "::1");
  CHECK(r->endpoint.port == 5);
  CHECK(r->server_id == "x");
}

TEST_CASE("other lines are not ready lines", "[net][ready_line]") {
  CHECK_FALSE(parse_ready_line(""));
  CHECK_FALSE(parse_ready_line("as_server starting"));
  CHECK_FALSE(parse_ready_line("as_server ready: listening on nowhere server_id=x"));
  CHECK_FALSE(parse_ready_line("as_server ready: listening on h:notaport server_id=x"));
}
