#include "http/tls.h"

#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/context.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace gateway::http {

namespace {

constexpr const char* kCertOption = "--tls-cert";
constexpr const char* kKeyOption = "--tls-key";

[[noreturn]] void refuse(const std::string& option, const std::string& path, const std::string& why) {
  throw std::runtime_error(option + " " + path + ": " + why);
}

// OpenSSL's reason for the last failure (its queue cleared), or fallback.
std::string openssl_reason(const char* fallback) {
  const unsigned long e = ::ERR_peek_last_error();
  std::string out = fallback;
  if (e != 0) {
    const char* reason = ::ERR_reason_error_string(e);
    if (reason) out = reason;
  }
  ::ERR_clear_error();
  return out;
}

// The whole file, after checking it is a regular file that can be read.
std::string read_pem(const std::string& option, const std::string& path, struct stat& st) {
  if (::stat(path.c_str(), &st) != 0)
    refuse(option, path, std::string("cannot read the file: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(option, path, "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse(option, path, std::string("cannot read the file: ") + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN") == std::string::npos)
    refuse(option, path, "not a PEM file (expected -----BEGIN ...-----)");
  return s.str();
}

struct BioFree {
  void operator()(BIO* b) const { ::BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { ::X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { ::EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

BioPtr memory_bio(const std::string& text) {
  return BioPtr(::BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string asn1_time(const ASN1_TIME* t) {
  BioPtr out(::BIO_new(BIO_s_mem()));
  if (!out || ::ASN1_TIME_print(out.get(), t) != 1) return "?";
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

// Called by OpenSSL for a key protected by a passphrase: there is none to give.
int no_passphrase(char*, int, int, void* asked) {
  *static_cast<bool*>(asked) = true;
  return -1;
}

}  // namespace

ServerTls load_server_tls(const std::string& cert_file, const std::string& key_file) {
  ServerTls out;
  struct stat cert_st {};
  struct stat key_st {};
  const std::string cert_pem = read_pem(kCertOption, cert_file, cert_st);
  const std::string key_pem = read_pem(kKeyOption, key_file, key_st);

  // The certificate (the first one of the file; those after it are its chain).
  if (cert_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    refuse(kCertOption, cert_file,
           "no certificate in the file (expected -----BEGIN CERTIFICATE-----; is this the key?)");
  auto cert_bio = memory_bio(cert_pem);
  X509Ptr cert(cert_bio ? ::PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert)
    refuse(kCertOption, cert_file, "not a valid PEM certificate: " + openssl_reason("cannot parse it"));
  if (::X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0)
    refuse(kCertOption, cert_file,
           "the certificate expired on " + asn1_time(X509_get0_notAfter(cert.get())) +
               " (clients refuse it): renew it");
  if (::X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0)
    out.warning = std::string(kCertOption) + " " + cert_file + ": the certificate is not valid before " +
                  asn1_time(X509_get0_notBefore(cert.get())) +
                  " (clients refuse it until then; is the clock right?)";

  // The key: unencrypted, private to its owner (and a group), belonging to the certificate.
  if (key_pem.find("PRIVATE KEY-----") == std::string::npos)
    refuse(kKeyOption, key_file,
           "no private key in the file (expected -----BEGIN PRIVATE KEY-----; is this the certificate?)");
  if ((key_st.st_mode & (S_IROTH | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(key_st.st_mode & 07777));
    refuse(kKeyOption, key_file,
           std::string("other users may read or write this private key (mode ") + mode + "): chmod 600 " +
               key_file + " (or 640 for a group such as ssl-cert)");
  }
  bool asked_passphrase = false;
  auto key_bio = memory_bio(key_pem);
  KeyPtr key(key_bio ? ::PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, &asked_passphrase)
                     : nullptr);
  if (!key && asked_passphrase) {
    ::ERR_clear_error();
    refuse(kKeyOption, key_file,
           "the key is protected by a passphrase, which the gateway cannot ask for: give it an "
           "unencrypted copy (openssl pkey -in KEY -out KEY.plain; chmod 600 KEY.plain)");
  }
  if (!key) refuse(kKeyOption, key_file, "not a valid PEM private key: " + openssl_reason("cannot parse it"));
  if (::X509_check_private_key(cert.get(), key.get()) != 1) {
    ::ERR_clear_error();
    throw std::runtime_error(std::string(kCertOption) + " " + cert_file + " and " + kKeyOption + " " +
                             key_file +
                             ": the key does not belong to the certificate (give the key the "
                             "certificate was made for)");
  }

  namespace ssl = boost::asio::ssl;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  SSL_CTX* native = ctx->native_handle();
  ::SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  ::SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  boost::system::error_code ec;
  ctx->use_certificate_chain(boost::asio::buffer(cert_pem), ec);
  if (ec) refuse(kCertOption, cert_file, "cannot use the certificate chain: " + ec.message());
  if (::SSL_CTX_use_PrivateKey(native, key.get()) != 1)
    refuse(kKeyOption, key_file, "cannot use the key: " + openssl_reason("refused"));
  if (::SSL_CTX_check_private_key(native) != 1)
    refuse(kKeyOption, key_file, "the key does not belong to the certificate: " + openssl_reason("mismatch"));
  out.context = std::move(ctx);
  return out;
}

}  // namespace gateway::http
