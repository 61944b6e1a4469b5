// Bearer tokens: the file format as_server's --auth-token-file has (one token per line, blank
// lines and '#' comments skipped, refused when group or others may read it), and a check that
// takes the same time whatever the token (SHA-256 digests compared with CRYPTO_memcmp, every
// token compared). Tokens are never logged.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace gateway {

// The tokens in path. Throws std::runtime_error naming the file and the problem (unreadable,
// readable by group or others, no token in it).
std::vector<std::string> read_token_file(const std::string& path);

class TokenCheck {
 public:
  TokenCheck() = default;  // no tokens: every request is let in
  explicit TokenCheck(const std::vector<std::string>& tokens);
  bool enabled() const { return !digests_.empty(); }
  // The value of an Authorization header ("Bearer TOKEN"): true when it names one of the tokens.
  bool accepts(std::string_view authorization) const;

 private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

}  // namespace gateway
