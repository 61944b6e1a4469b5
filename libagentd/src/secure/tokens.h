// Access tokens: reading token files (refusing ones other users could read), holding the
// accepted set and checking a presented token in constant time, making random tokens.
// No state shared between threads: a TokenSet is built once and then only read.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

// Reads the tokens in path: one per line, surrounding whitespace trimmed, blank lines and lines
// starting with '#' skipped. option names the flag in messages (e.g. "--auth-token-file").
// Throws Error(config_error) saying what and where when the file cannot be read, is readable or
// writable by group or others (as ssh refuses such keys: `chmod 600 FILE`), or holds no token.
std::vector<std::string> read_token_file(const std::string& path, const std::string& option);

// A fresh token: 32 random bytes from OpenSSL's generator, in hex (64 characters).
std::string random_token();

// The token a client presents: given when not empty, else $AGENTD_TOKEN, else "".
std::string client_token(const std::string& given);

// The tokens a server accepts. Empty: authentication is off and every token is accepted.
class TokenSet {
 public:
  // What a token is known by once read: its SHA-256 digest.
  using Digest = std::array<unsigned char, 32>;

  TokenSet() = default;
  explicit TokenSet(const std::vector<std::string>& tokens);

  bool empty() const { return digests_.empty(); }
  std::size_t size() const { return digests_.size(); }
  // Compares the SHA-256 digests of token and of every accepted token with CRYPTO_memcmp, all of
  // them every time: the answer's timing says nothing about how much of a token was right.
  bool accepts(std::string_view token) const { return match(token).has_value(); }
  // The same check, answering with the digest of the token when it is accepted (with
  // authentication off: the digest of whatever was presented).
  std::optional<Digest> match(std::string_view token) const;
  // Whether a token known by digest is among the accepted ones (always, with authentication off).
  bool contains(const Digest& digest) const;

 private:
  std::vector<Digest> digests_;
};

}  // namespace agentd::detail
