#include "tokens.h"

#include "error_of.h"
#include "scoped_env.h"
#include "server_process.h"  // TempDir

#include <sys/stat.h>

#include <catch2/catch.hpp>

using namespace agentd;
using namespace agentd::detail;
using agentd::test::error_of;
using agentd::test::ScopedEnv;
using agentd::test::TempDir;

TEST_CASE("a token file: one token a line, trimmed, comments and blank lines skipped", "[secure][tokens]") {
  TempDir dir;
  auto path = dir.write("t", "# tokens\n  alpha-token  \n\n\tbeta\r\n#gamma\n");
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  CHECK(read_token_file(path, "--auth-token-file") == std::vector<std::string>{"alpha-token", "beta"});
  REQUIRE(::chmod(path.c_str(), 0400) == 0);
  CHECK(read_token_file(path, "--auth-token-file").size() == 2);
}

TEST_CASE("a token file open to group or others is refused with the fix", "[secure][tokens]") {
  TempDir dir;
  auto path = dir.write("t", "secret\n");
  for (mode_t mode : {0604, 0640, 0660, 0602, 0620}) {
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    auto e = error_of([&] { read_token_file(path, "--token-file"); });
    CHECK(e.code() == ErrorCode::config_error);
    CHECK_THAT(e.message(), Catch::StartsWith("--token-file " + path) && Catch::Contains("chmod 600") &&
                                !Catch::Contains("secret"));
  }
}

TEST_CASE("an empty or missing token file is refused", "[secure][tokens]") {
  TempDir dir;
  auto path = dir.write("t", "# only a comment\n   \n");
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  CHECK_THAT(error_of([&] { read_token_file(path, "--x"); }).message(),
             Catch::Contains("no token in the file"));
  CHECK_THAT(error_of([&] { read_token_file(dir.path() + "/absent", "--x"); }).message(),
             Catch::Contains("cannot read the token file") && Catch::Contains("No such file"));
  CHECK_THAT(error_of([&] { read_token_file(dir.path(), "--x"); }).message(),
             Catch::Contains("not a regular file"));
}

TEST_CASE("a TokenSet accepts exactly its tokens, and an empty one accepts everything", "[secure][tokens]") {
  TokenSet none;
  CHECK(none.empty());
  CHECK(none.accepts(""));
  CHECK(none.accepts("anything"));
  TokenSet set({"alpha-token", "beta"});
  CHECK(set.size() == 2);
  CHECK(set.accepts("alpha-token"));
  CHECK(set.accepts("beta"));
  CHECK_FALSE(set.accepts(""));
  CHECK_FALSE(set.accepts("alpha-toke"));
  CHECK_FALSE(set.accepts("alpha-token "));
  CHECK_FALSE(set.accepts("BETA"));
}

TEST_CASE("random tokens are 64 hex characters and differ", "[secure][tokens]") {
  auto a = random_token();
  auto b = random_token();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("a client's token: the given one, else $AGENTD_TOKEN", "[secure][tokens]") {
  {
    ScopedEnv env{{"AGENTD_TOKEN", " from-env\n"}};
    CHECK(client_token("") == "from-env");
    CHECK(client_token("given") == "given");
  }
  ScopedEnv env{{"AGENTD_TOKEN", ""}};
  CHECK(client_token("").empty());
}

TEST_CASE("a TokenSet names the token that matched by its digest, for checking it again later",
          "[secure][tokens]") {
  TokenSet set({"first-token", "second-token"});
  auto first = set.match("first-token");
  REQUIRE(first);
  CHECK_FALSE(set.match("third-token"));
  CHECK(set.contains(*first));
  TokenSet rotated({"second-token", "third-token"});
  CHECK_FALSE(rotated.contains(*first));
  CHECK(rotated.contains(*set.match("second-token")));
  // With authentication off every token is accepted, and stays so.
  TokenSet open;
  REQUIRE(open.match("anything"));
  CHECK(open.contains(*open.match("anything")));
}
