// TLS (secure/tls.h) with real certificates (TestPki: made with the openssl CLI in a temporary
// directory) and handshakes over kj::newTwoWayPipe, both ends on this thread's loop. Asserts that
// a bad certificate or key is refused at start with the option and file named; that a
// handshake succeeds exactly when the peer's certificate is trusted and names the host dialled
// (and, for mutual TLS, when the client's is signed by the CA the server requires); and that a
// sniffed first byte tells TLS from plaintext and is given back to the stream.
#include "tls.h"

#include "error_of.h"
#include "test_names.h"
#include "test_pki.h"

#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <memory>
#include <optional>
#include <string>

using namespace agentd::test;
using agentd::detail::TlsConfig;
using agentd::detail::TlsFiles;
namespace detail = agentd::detail;

namespace {

TlsFiles server_files(const TestPki& pki, const std::string& client_ca = {}) {
  TlsFiles f;
  f.cert = pki.server_cert;
  f.key = pki.server_key;
  f.ca = client_ca;
  return f;
}

TlsFiles client_files(const std::string& ca, const std::string& cert = {}, const std::string& key = {}) {
  TlsFiles f;
  f.ca = ca;
  f.cert = cert;
  f.key = key;
  f.cert_name = "tls_cert";
  f.key_name = "tls_key";
  f.ca_name = "tls_ca";
  return f;
}

// How a handshake between the two ended: each side's stream, or its error.
struct Handshake {
  kj::Own<kj::AsyncIoStream> server, client;
  std::string server_error, client_error;
  bool timed_out = false;
  bool ok() const { return server && client; }
};

// Runs both ends of a handshake over an in-memory pipe until both have finished (a side that
// fails drops its end, so the other one sees the connection close).
Handshake handshake(kj::AsyncIoContext& io, TlsConfig& server, TlsConfig& client, const std::string& host) {
  auto pipe = kj::newTwoWayPipe();
  Handshake h;
  auto s = server.accept(kj::mv(pipe.ends[0]))
               .then([&h](kj::Own<kj::AsyncIoStream> st) { h.server = kj::mv(st); },
                     [&h](kj::Exception&& e) { h.server_error = e.getDescription().cStr(); });
  auto c = client.connect(kj::mv(pipe.ends[1]), host)
               .then([&h](kj::Own<kj::AsyncIoStream> st) { h.client = kj::mv(st); },
                     [&h](kj::Exception&& e) { h.client_error = e.getDescription().cStr(); });
  kj::joinPromises(kj::arr(kj::mv(s), kj::mv(c)))
      .exclusiveJoin(io.provider->getTimer().afterDelay(20 * kj::SECONDS).then([&h] { h.timed_out = true; }))
      .wait(io.waitScope);
  return h;
}

// Bytes written on one end arrive on the other. (A write to an in-memory pipe finishes when the
// other end has read it, so the read runs the loop.)
std::string round_trip(kj::AsyncIoContext& io, kj::AsyncIoStream& from, kj::AsyncIoStream& to,
                       const std::string& text) {
  auto written = from.write(text.data(), text.size());
  std::string got(text.size(), '\0');
  const size_t n = to.read(&got[0], text.size(), text.size()).wait(io.waitScope);
  written.wait(io.waitScope);
  got.resize(n);
  return got;
}

}  // namespace

TEST_CASE("TLS contexts from real certificate and key files", "[secure][tls]") {
  TestPki pki;
  auto server = TlsConfig::server(server_files(pki));
  CHECK_FALSE(server->requires_client_certificates());
  auto mutual = TlsConfig::server(server_files(pki, pki.ca));
  CHECK(mutual->requires_client_certificates());
  CHECK(TlsConfig::client(client_files(pki.ca)));
  CHECK(TlsConfig::client(client_files(pki.ca, pki.client_cert, pki.client_key)));
}

TEST_CASE(
    "a certificate or key that cannot be used is refused at start, naming the option and "
    "the file",
    "[secure][tls]") {
  TestPki pki;
  const std::string junk = pki.dir.write("junk.pem", "not a certificate\n");
  const std::string fake =
      pki.dir.write("fake.pem", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n");
  const std::string missing = pki.path("missing.pem");
  auto refused = [](const TlsFiles& f, bool server) {
    Error e = error_of([&] {
      if (server)
        TlsConfig::server(f);
      else
        TlsConfig::client(f);
    });
    CHECK(e.code() == ErrorCode::config_error);
    return e.message();
  };

  TlsFiles no_key = server_files(pki);
  no_key.key.clear();
  CHECK_THAT(refused(no_key, true), Contains("TLS needs both --tls-cert and --tls-key"));

  TlsFiles unreadable = server_files(pki);
  unreadable.cert = missing;
  CHECK_THAT(refused(unreadable, true), Contains("--tls-cert " + missing + ": cannot read the file"));

  TlsFiles not_pem = server_files(pki);
  not_pem.key = junk;
  CHECK_THAT(refused(not_pem, true), Contains("--tls-key " + junk + ": not a PEM file"));

  TlsFiles bad_pem = server_files(pki);
  bad_pem.cert = fake;
  CHECK_THAT(refused(bad_pem, true), Contains("--tls-cert " + fake) && Contains("not a valid PEM"));

  // A key of another certificate: found at start, not at the first client's handshake.
  TlsFiles other_key = server_files(pki);
  other_key.key = pki.client_key;
  CHECK_THAT(refused(other_key, true), Contains(pki.server_cert) && Contains(pki.client_key) &&
                                           Contains("the key does not belong to the certificate"));

  // A CA bundle without a certificate (a key given by mistake).
  CHECK_THAT(refused(server_files(pki, pki.client_key), true),
             Contains("--tls-client-ca " + pki.client_key) && Contains("no certificate in the file"));

  // The client's options are named as the client knows them.
  CHECK_THAT(refused(client_files(pki.ca, pki.client_cert), false),
             Contains("a client certificate needs both tls_cert and tls_key"));
  CHECK_THAT(refused(client_files(junk), false), Contains("tls_ca " + junk));
  CHECK_THAT(refused(client_files(pki.ca, pki.client_cert, pki.server_key), false),
             Contains("the key does not belong to the certificate"));
}

TEST_CASE("a handshake succeeds when the server's certificate is trusted and names the host",
          "[secure][tls]") {
  TestPki pki;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto server = TlsConfig::server(server_files(pki));

  auto trusting = TlsConfig::client(client_files(pki.ca));
  auto h = handshake(io, *server, *trusting, "127.0.0.1");
  REQUIRE_FALSE(h.timed_out);
  INFO("server: " << h.server_error << "; client: " << h.client_error);
  REQUIRE(h.ok());
  CHECK(round_trip(io, *h.client, *h.server, "hello over TLS") == "hello over TLS");
  CHECK(round_trip(io, *h.server, *h.client, "and back") == "and back");

  SECTION("a certificate from a CA the client does not trust") {
    auto other = TlsConfig::client(client_files(pki.other_ca));
    auto bad = handshake(io, *server, *other, "127.0.0.1");
    CHECK_FALSE(bad.timed_out);
    CHECK_FALSE(bad.client);
    CHECK_FALSE(bad.client_error.empty());
  }
  SECTION("a certificate for another host") {
    auto bad = handshake(io, *server, *trusting, "elsewhere.example");
    CHECK_FALSE(bad.timed_out);
    CHECK_FALSE(bad.client);
    CHECK_FALSE(bad.client_error.empty());
  }
}

TEST_CASE("mutual TLS: the server takes only clients with a certificate from its CA", "[secure][tls]") {
  TestPki pki;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  auto server = TlsConfig::server(server_files(pki, pki.ca));

  auto with_cert = TlsConfig::client(client_files(pki.ca, pki.client_cert, pki.client_key));
  auto h = handshake(io, *server, *with_cert, "127.0.0.1");
  REQUIRE_FALSE(h.timed_out);
  INFO("server: " << h.server_error << "; client: " << h.client_error);
  REQUIRE(h.ok());
  CHECK(round_trip(io, *h.client, *h.server, "mutual") == "mutual");

  auto without = TlsConfig::client(client_files(pki.ca));
  auto refused = handshake(io, *server, *without, "127.0.0.1");
  CHECK_FALSE(refused.timed_out);
  CHECK_FALSE(refused.server);
  CHECK_FALSE(refused.server_error.empty());

  auto foreign = TlsConfig::client(client_files(pki.ca, pki.other_client_cert, pki.other_client_key));
  auto refused2 = handshake(io, *server, *foreign, "127.0.0.1");
  CHECK_FALSE(refused2.timed_out);
  CHECK_FALSE(refused2.server);
}

TEST_CASE("the first byte tells a TLS client from a plaintext one, and is read again after",
          "[secure][tls]") {
  kj::AsyncIoContext io = kj::setupAsyncIo();

  SECTION("plaintext: every byte arrives, the sniffed one first") {
    auto pipe = kj::newTwoWayPipe();
    const std::string sent("\x00\x01\x02rest of a message", 20);
    auto written = pipe.ends[1]->write(sent.data(), sent.size());
    auto s = detail::sniff_first_byte(kj::mv(pipe.ends[0])).wait(io.waitScope);
    CHECK_FALSE(s.tls);
    CHECK_FALSE(s.empty);
    std::string got(sent.size(), '\0');
    CHECK(s.stream->read(&got[0], sent.size(), sent.size()).wait(io.waitScope) == sent.size());
    written.wait(io.waitScope);
    CHECK(got == sent);
  }
  SECTION("a client that closes without a byte") {
    auto pipe = kj::newTwoWayPipe();
    pipe.ends[1]->shutdownWrite();
    auto s = detail::sniff_first_byte(kj::mv(pipe.ends[0])).wait(io.waitScope);
    CHECK(s.empty);
    CHECK_FALSE(s.tls);
  }
  SECTION("TLS: the handshake completes on the sniffed stream") {
    TestPki pki;
    auto server = TlsConfig::server(server_files(pki));
    auto client = TlsConfig::client(client_files(pki.ca));
    auto pipe = kj::newTwoWayPipe();
    bool sniffed_tls = false;
    kj::Own<kj::AsyncIoStream> server_stream, client_stream;
    auto s = detail::sniff_first_byte(kj::mv(pipe.ends[0]))
                 .then([&](detail::Sniffed sn) {
                   sniffed_tls = sn.tls;
                   return server->accept(kj::mv(sn.stream));
                 })
                 .then([&](kj::Own<kj::AsyncIoStream> st) { server_stream = kj::mv(st); });
    auto c = client->connect(kj::mv(pipe.ends[1]), "127.0.0.1").then([&](kj::Own<kj::AsyncIoStream> st) {
      client_stream = kj::mv(st);
    });
    kj::joinPromises(kj::arr(kj::mv(s), kj::mv(c))).wait(io.waitScope);
    CHECK(sniffed_tls);
    REQUIRE(server_stream);
    REQUIRE(client_stream);
    CHECK(round_trip(io, *client_stream, *server_stream, "sniffed") == "sniffed");
  }
}
