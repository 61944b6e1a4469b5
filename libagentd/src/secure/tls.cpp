#include "tls.h"

#include "forwarding_stream.h"

#include <agentd/error.h>

#include <fmt/format.h>

#include <kj/vector.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>

namespace agentd::detail {

namespace {

std::string read_pem(const std::string& path, const std::string& option) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::config_error, fmt::format("{} {}: cannot read the file", option, path));
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN") == std::string::npos)
    throw Error(ErrorCode::config_error,
                fmt::format("{} {}: not a PEM file (expected -----BEGIN ...-----)", option, path));
  return s.str();
}

template <typename T>
T parse_pem(const std::string& path, const std::string& option, const char* what) {
  std::string pem = read_pem(path, option);
  try {
    return T(kj::StringPtr(pem.c_str(), pem.size()));
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("{} {}: not a valid PEM {}: {}", option, path, what, e.getDescription().cStr()));
  }
}

// kj-tls checks the pair only at the first handshake; check it at start instead.
void check_key_matches(const std::string& cert_pem, const std::string& key_pem, const TlsFiles& f) {
  BIO* cb = ::BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  BIO* kb = ::BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  X509* cert = cb ? ::PEM_read_bio_X509(cb, nullptr, nullptr, nullptr) : nullptr;
  EVP_PKEY* key = kb ? ::PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
  const bool ok = cert && key && ::X509_check_private_key(cert, key) == 1;
  ::X509_free(cert);
  ::EVP_PKEY_free(key);
  ::BIO_free(cb);
  ::BIO_free(kb);
  ::ERR_clear_error();
  if (!ok)
    throw Error(ErrorCode::config_error,
                fmt::format("{} {} and {} {}: the key does not belong to the certificate (give "
                            "the key the certificate was made for)",
                            f.cert_name, f.cert, f.key_name, f.key));
}

// Every certificate of a PEM bundle, each on its own: kj trusts only the first certificate of
// each TlsCertificate it is given.
kj::Array<kj::TlsCertificate> parse_bundle(const std::string& path, const std::string& option) {
  std::string pem = read_pem(path, option);
  static const std::string kEnd = "-----END CERTIFICATE-----";
  kj::Vector<kj::TlsCertificate> out;
  for (std::size_t at = pem.find("-----BEGIN CERTIFICATE-----"); at != std::string::npos;
       at = pem.find("-----BEGIN CERTIFICATE-----", at)) {
    auto end = pem.find(kEnd, at);
    if (end == std::string::npos) break;
    end += kEnd.size();
    std::string one = pem.substr(at, end - at) + "\n";
    try {
      out.add(kj::StringPtr(one.c_str(), one.size()));
    } catch (const kj::Exception& e) {
      throw Error(ErrorCode::config_error, fmt::format("{} {}: certificate {} is not valid: {}", option, path,
                                                       out.size() + 1, e.getDescription().cStr()));
    }
    at = end;
  }
  if (out.size() == 0)
    throw Error(ErrorCode::config_error, fmt::format("{} {}: no certificate in the file (expected -----BEGIN "
                                                     "CERTIFICATE-----)",
                                                     option, path));
  return out.releaseAsArray();
}

// A stream whose first byte was read already: reads return it first.
class ReplayStream final : public ForwardingStream {
 public:
  ReplayStream(kj::Own<kj::AsyncIoStream> inner, kj::byte first)
      : ForwardingStream(kj::mv(inner)), first_(first) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    if (replayed_ || maxBytes == 0) return inner_->tryRead(buffer, minBytes, maxBytes);
    replayed_ = true;
    auto* out = static_cast<kj::byte*>(buffer);
    out[0] = first_;
    if (minBytes <= 1) return size_t(1);
    return inner_->tryRead(out + 1, minBytes - 1, maxBytes - 1).then([](size_t n) { return n + 1; });
  }

 private:
  kj::byte first_;
  bool replayed_ = false;
};

}  // namespace

std::unique_ptr<TlsConfig> TlsConfig::server(const TlsFiles& f) {
  if (f.cert.empty() || f.key.empty())
    throw Error(ErrorCode::config_error,
                fmt::format("TLS needs both {} and {} (PEM files)", f.cert_name, f.key_name));
  std::unique_ptr<TlsConfig> c(new TlsConfig());
  auto key = parse_pem<kj::TlsPrivateKey>(f.key, f.key_name, "private key");
  auto cert = parse_pem<kj::TlsCertificate>(f.cert, f.cert_name, "certificate");
  check_key_matches(read_pem(f.cert, f.cert_name), read_pem(f.key, f.key_name), f);
  c->keypair_ = kj::TlsKeypair{kj::mv(key), kj::mv(cert)};
  kj::TlsContext::Options o;
  KJ_IF_MAYBE (kp, c->keypair_) {
    o.defaultKeypair = *kp;
  }
  if (!f.ca.empty()) {
    c->trusted_ = parse_bundle(f.ca, f.ca_name);
    o.useSystemTrustStore = false;
    o.verifyClients = true;
    o.trustedCertificates = c->trusted_;
    c->verify_clients_ = true;
  }
  try {
    c->context_ = kj::heap<kj::TlsContext>(kj::mv(o));
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("{} {} and {} {}: {} (does the key belong to the certificate?)", f.cert_name,
                            f.cert, f.key_name, f.key, e.getDescription().cStr()));
  }
  return c;
}

std::unique_ptr<TlsConfig> TlsConfig::client(const TlsFiles& f) {
  if (f.cert.empty() != f.key.empty())
    throw Error(ErrorCode::config_error,
                fmt::format("a client certificate needs both {} and {}", f.cert_name, f.key_name));
  std::unique_ptr<TlsConfig> c(new TlsConfig());
  kj::TlsContext::Options o;
  if (!f.cert.empty()) {
    auto key = parse_pem<kj::TlsPrivateKey>(f.key, f.key_name, "private key");
    auto cert = parse_pem<kj::TlsCertificate>(f.cert, f.cert_name, "certificate");
    check_key_matches(read_pem(f.cert, f.cert_name), read_pem(f.key, f.key_name), f);
    c->keypair_ = kj::TlsKeypair{kj::mv(key), kj::mv(cert)};
    KJ_IF_MAYBE (kp, c->keypair_) {
      o.defaultKeypair = *kp;
    }
  }
  if (!f.ca.empty()) {
    c->trusted_ = parse_bundle(f.ca, f.ca_name);
    o.useSystemTrustStore = false;
    o.trustedCertificates = c->trusted_;
  }
  try {
    c->context_ = kj::heap<kj::TlsContext>(kj::mv(o));
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("TLS client set-up failed: {}", e.getDescription().cStr()));
  }
  return c;
}

TlsConfig::~TlsConfig() = default;

kj::Promise<kj::Own<kj::AsyncIoStream>> TlsConfig::accept(kj::Own<kj::AsyncIoStream> stream) {
  return context_->wrapServer(kj::mv(stream));
}

kj::Promise<kj::Own<kj::AsyncIoStream>> TlsConfig::connect(kj::Own<kj::AsyncIoStream> stream,
                                                           const std::string& host) {
  return context_->wrapClient(kj::mv(stream), kj::StringPtr(host.c_str(), host.size()));
}

kj::Promise<Sniffed> sniff_first_byte(kj::Own<kj::AsyncIoStream> stream) {
  auto first = kj::heap<kj::byte>(0);
  kj::byte* at = first.get();
  auto read = stream->tryRead(at, 1, 1);
  return read.then([stream = kj::mv(stream), first = kj::mv(first)](size_t n) mutable {
    Sniffed s;
    if (n == 0) {
      s.empty = true;
      s.stream = kj::mv(stream);
      return s;
    }
    s.first = *first;
    s.tls = *first == 22;  // a TLS record of type handshake; Cap'n Proto starts 0x00..0x03 here
    s.stream = kj::heap<ReplayStream>(kj::mv(stream), *first);
    return s;
  });
}

}  // namespace agentd::detail
