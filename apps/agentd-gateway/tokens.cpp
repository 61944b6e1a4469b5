#include "tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <fstream>
#include <stdexcept>

namespace gateway {

namespace {

std::array<unsigned char, 32> digest(std::string_view text) {
  std::array<unsigned char, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d.data());
  return d;
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

}  // namespace

std::vector<std::string> read_token_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot read token file " + path);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    throw std::runtime_error("token file " + path + " may be read by group or others: chmod 600 " + path);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read token file " + path);
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    const auto t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    tokens.emplace_back(t);
  }
  if (tokens.empty()) throw std::runtime_error("token file " + path + " holds no token");
  return tokens;
}

TokenCheck::TokenCheck(const std::vector<std::string>& tokens) {
  for (const auto& t : tokens) digests_.push_back(digest(t));
}

bool TokenCheck::accepts(std::string_view authorization) const {
  constexpr std::string_view kScheme = "Bearer ";
  const bool has_scheme =
      authorization.size() > kScheme.size() && authorization.substr(0, kScheme.size()) == kScheme;
  const auto given = digest(has_scheme ? trim(authorization.substr(kScheme.size())) : std::string_view{});
  bool ok = false;
  for (const auto& d : digests_) ok |= CRYPTO_memcmp(d.data(), given.data(), d.size()) == 0;
  return ok && has_scheme;
}

}  // namespace gateway
