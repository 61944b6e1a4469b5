// HTTPS towards the gateway's clients: the server's TLS context, made once at start from
// --tls-cert and --tls-key (PEM) and checked there, so a file that cannot serve is a clear error
// at start rather than a failed handshake later. TLS 1.2 and 1.3 only.
#pragma once

#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace gateway::http {

struct ServerTls {
  // Shared by the listener and every TLS connection (a connection may outlive the listener).
  std::shared_ptr<boost::asio::ssl::context> context;
  std::string warning;  // non-empty: something to tell the operator (a certificate not valid yet)
};

// The context serving cert_file (the certificate, then its chain) with key_file (its private
// key, unencrypted). Throws std::runtime_error naming the option, the file and what is wrong
// with it: unreadable (and why), not PEM, not a certificate or key, a key protected by a
// passphrase, a key others may read (chmod 600, or 640 for a group such as ssl-cert), a key
// that does not belong to the certificate, or a certificate that has expired.
ServerTls load_server_tls(const std::string& cert_file, const std::string& key_file);

}  // namespace gateway::http
