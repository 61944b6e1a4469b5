#include "tokens.h"

#include <agentd/error.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace agentd::detail {

namespace {

std::array<unsigned char, 32> digest(std::string_view text) {
  std::array<unsigned char, 32> out{};
  ::SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data());
  return out;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<std::string> read_token_file(const std::string& path, const std::string& option) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(ErrorCode::config_error,
                fmt::format("{} {}: cannot read the token file: {}", option, path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::config_error, fmt::format("{} {}: not a regular file", option, path));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    throw Error(ErrorCode::config_error,
                fmt::format("{} {}: permissions {:04o} are too open: other users could read the "
                            "token; make it private to its owner with `chmod 600 {}`",
                            option, path, st.st_mode & 07777, path));
  std::ifstream in(path);
  if (!in)
    throw Error(ErrorCode::config_error,
                fmt::format("{} {}: cannot read the token file: {}", option, path, std::strerror(errno)));
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    tokens.push_back(std::move(t));
  }
  if (tokens.empty())
    throw Error(ErrorCode::config_error,
                fmt::format("{} {}: no token in the file (one token per line; make one with "
                            "`openssl rand -hex 32`)",
                            option, path));
  return tokens;
}

std::string random_token() {
  unsigned char bytes[32];
  if (::RAND_bytes(bytes, sizeof bytes) != 1)
    throw Error(ErrorCode::internal, "cannot make a random token: OpenSSL's RAND_bytes failed");
  std::string out;
  out.reserve(2 * sizeof bytes);
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

std::string client_token(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("AGENTD_TOKEN");
  return env ? trim(env) : std::string{};
}

TokenSet::TokenSet(const std::vector<std::string>& tokens) {
  digests_.reserve(tokens.size());
  for (const auto& t : tokens) digests_.push_back(digest(t));
}

std::optional<TokenSet::Digest> TokenSet::match(std::string_view token) const {
  const auto presented = digest(token);
  if (digests_.empty()) return presented;
  int matched = 0;
  for (const auto& d : digests_)
    matched |= ::CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0 ? 1 : 0;
  if (matched == 0) return std::nullopt;
  return presented;
}

bool TokenSet::contains(const Digest& d) const {
  if (digests_.empty()) return true;
  int matched = 0;
  for (const auto& mine : digests_) matched |= ::CRYPTO_memcmp(mine.data(), d.data(), d.size()) == 0 ? 1 : 0;
  return matched != 0;
}

}  // namespace agentd::detail
