// TestPki: a throw-away PKI for TLS tests, made with the openssl CLI in a fresh directory.
#pragma once

#include "server_process.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace agentd::test {

// A throw-away PKI made with the openssl CLI: a CA with a server certificate for 127.0.0.1 and
// a client certificate, a server certificate naming another host, and a second CA with a client
// certificate of its own. kj-tls (Cap'n Proto 0.9.2) checks the name a client dials against the
// certificate's DNS names, so the server certificate lists 127.0.0.1 as a DNS name too.
struct TestPki {
  TempDir dir;
  std::string path(const std::string& name) const { return dir.path() + "/" + name; }
  std::string ca = path("ca.pem"), server_cert = path("server.pem"), server_key = path("server.key"),
              client_cert = path("client.pem"), client_key = path("client.key"),
              elsewhere_cert = path("elsewhere.pem"), elsewhere_key = path("elsewhere.key"),
              other_ca = path("other-ca.pem"), other_client_cert = path("other-client.pem"),
              other_client_key = path("other-client.key");

  TestPki() {
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    auto make_ca = [&](const std::string& name) {
      return "openssl req -x509 " + key + " -keyout " + name + ".key -out " + name +
             ".pem -days 2 -subj /CN=" + name + " && ";
    };
    auto issue = [&](const std::string& name, const std::string& ca_name, const std::string& cn,
                     const std::string& san) {
      std::string ext = san.empty() ? "" : " -extfile " + name + ".ext";
      return (san.empty() ? "" : "printf 'subjectAltName=" + san + "\\n' > " + name + ".ext && ") +
             "openssl req " + key + " -keyout " + name + ".key -out " + name + ".csr -subj /CN=" + cn +
             " && openssl x509 -req -in " + name + ".csr -CA " + ca_name + ".pem -CAkey " + ca_name +
             ".key -CAcreateserial -out " + name + ".pem -days 2" + ext + " && ";
    };
    std::string cmd = "cd " + dir.path() + " && " + make_ca("ca") + make_ca("other-ca") +
                      issue("server", "ca", "127.0.0.1", "DNS:127.0.0.1,IP:127.0.0.1,DNS:localhost") +
                      issue("client", "ca", "agentd-client", "") +
                      issue("elsewhere", "ca", "elsewhere.example", "DNS:elsewhere.example") +
                      issue("other-client", "other-ca", "other-client", "") + "true >/dev/null 2>&1";
    REQUIRE(std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()) == 0);
  }
};

}  // namespace agentd::test
