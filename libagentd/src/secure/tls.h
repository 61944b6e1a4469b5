// TLS over kj-tls (Cap'n Proto's, on OpenSSL): the server's context (--tls-cert, --tls-key,
// --tls-client-ca for mutual TLS), a client's (a CA bundle to trust, optionally its own
// certificate), and telling a TLS client from a plaintext one by the first byte it sends, so a
// mismatch gets a clear answer instead of a hang or a parse error.
// A TlsConfig is made once and then used on one loop thread.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/tls.h>

#include <memory>
#include <string>

namespace agentd::detail {

// PEM files, and the names to blame in messages (an option, or a ClientOptions field).
struct TlsFiles {
  std::string cert;  // certificate chain (server: required; client: optional, for mutual TLS)
  std::string key;   // the certificate's private key (unencrypted)
  std::string ca;    // CA bundle: a server requires client certificates signed by it; a client
                     // requires the server's to be (empty for a client: the system's CAs)
  std::string cert_name = "--tls-cert";
  std::string key_name = "--tls-key";
  std::string ca_name = "--tls-client-ca";
};

class TlsConfig {
 public:
  // Throws Error(config_error) naming the option and file when one cannot be read or parsed,
  // or when only one of cert and key is given.
  static std::unique_ptr<TlsConfig> server(const TlsFiles& files);
  static std::unique_ptr<TlsConfig> client(const TlsFiles& files);
  ~TlsConfig();

  // The handshake as a server / as a client of host (verified against the server's
  // certificate). The promises break with kj's description of what failed.
  kj::Promise<kj::Own<kj::AsyncIoStream>> accept(kj::Own<kj::AsyncIoStream> stream);
  kj::Promise<kj::Own<kj::AsyncIoStream>> connect(kj::Own<kj::AsyncIoStream> stream, const std::string& host);

  bool requires_client_certificates() const { return verify_clients_; }

 private:
  TlsConfig() = default;
  kj::Maybe<kj::TlsKeypair> keypair_;
  kj::Array<kj::TlsCertificate> trusted_;
  kj::Own<kj::TlsContext> context_;
  bool verify_clients_ = false;
};

// The first byte a client sends, and the stream it came from with that byte put back.
struct Sniffed {
  bool tls = false;    // a TLS handshake (record type 22) rather than a Cap'n Proto message
  bool empty = false;  // the client closed without sending anything
  kj::byte first = 0;
  kj::Own<kj::AsyncIoStream> stream;
};
kj::Promise<Sniffed> sniff_first_byte(kj::Own<kj::AsyncIoStream> stream);

}  // namespace agentd::detail
