// Hostile input against a real as_server: random bytes, truncated frames, frames claiming huge
// segment counts or sizes, messages the RPC protocol does not allow, deeply nested values,
// thousands of idle connections and a client that stops reading. Throughout, a normal client
// keeps being served, the server's memory stays bounded, and each connection the server closes
// for what it sent is logged once with its address.
#include "error_of.h"
#include "loopback.h"
#include "raw_login.h"
#include "sanitizers.h"
#include "server_process.h"

#include "agentd.capnp.h"

#include <agentd/client.h>
#include <agentd/error.h>
#include <agentd/value_limits.h>

#include <sys/resource.h>
#include <unistd.h>

#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <capnp/rpc-twoparty.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace agentd;
using namespace agentd::test;
using namespace std::chrono_literals;

namespace {

#ifdef AGENTD_TEST_ASAN
constexpr std::uint64_t kSlack = 3;  // ASan's redzones and shadow memory
#else
constexpr std::uint64_t kSlack = 1;
#endif

// Under AddressSanitizer, freed memory waits in a quarantine (256 MiB by default) before it is
// reused, which a memory bound would measure: servers started after this keep a small one.
void small_asan_quarantine() {
#ifdef AGENTD_TEST_ASAN
  std::string opts = std::getenv("ASAN_OPTIONS") ? std::getenv("ASAN_OPTIONS") : "";
  ::setenv("ASAN_OPTIONS", (opts + (opts.empty() ? "" : ":") + "quarantine_size_mb=16").c_str(), 1);
#endif
}

// Takes every descriptor the hard limit allows (servers started afterwards inherit it).
rlim_t raise_fd_limit() {
  rlimit fds{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &fds) == 0);
  fds.rlim_cur = fds.rlim_max;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &fds) == 0);
  return fds.rlim_cur;
}

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A frame holding an RPC Return message for question 12345, which the server never asked.
std::string stray_return() {
  capnp::MallocMessageBuilder b;
  b.initRoot<capnp::rpc::Message>().initReturn().setAnswerId(12345);
  auto words = capnp::messageToFlatArray(b);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

std::string random_bytes(std::uint32_t seed, std::size_t n) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Lines the server logged at error level ("TIME error MESSAGE" in the text log format).
std::size_t error_lines(const std::string& log) {
  std::size_t n = 0;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string time, level;
    fields >> time >> level;
    if (level == "error" || level == "critical") ++n;
  }
  return n;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Peak and current resident memory of a process, from /proc (KiB).
struct Rss {
  std::uint64_t now_kib = 0;
  std::uint64_t peak_kib = 0;
};
Rss rss_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  Rss r;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    fields >> key >> kib;
    if (key == "VmRSS:") r.now_kib = kib;
    if (key == "VmHWM:") r.peak_kib = kib;
  }
  return r;
}

// A normal client's round trip: what must keep working whatever the other connections do.
void normal_round_trip(AgentRef& agent, int i) {
  auto reply = agent.reply(Msg("user", "still here " + std::to_string(i))).get(10s);
  REQUIRE(reply.content.get<std::string>().find("still here " + std::to_string(i)) != std::string::npos);
}

// A raw Cap'n Proto connection (the schema's generated code only), on its own event loop.
struct RawRpc {
  explicit RawRpc(std::uint16_t port)
      : stream(io.provider->getNetwork()
                   .parseAddress("127.0.0.1", port)
                   .wait(io.waitScope)
                   ->connect()
                   .wait(io.waitScope)),
        rpc(*stream),
        server(raw_login(rpc)) {}  // through the gate (no token: the test server has none)
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient rpc;
  wire::AgentServer::Client server;
};

// A value nested `depth` lists deep.
void write_nested(wire::Value::Builder v, int depth) {
  for (int i = 0; i < depth; ++i) v = v.initList(1)[0];
  v.setText("bottom");
}

// How deep v nests (lists and objects; a scalar is 0), without recursing.
int depth_of(const Value& v) {
  int depth = 0;
  for (const Value* at = &v; at->is_array() || at->is_object(); ++depth) {
    if (at->empty()) return depth + 1;
    at = at->is_array() ? &(*at)[0] : &at->begin().value();
  }
  return depth;
}

// Records how many CallDones arrived and the error codes among them.
class SinkCounter final : public wire::CallSink::Server {
 public:
  explicit SinkCounter(std::vector<wire::ErrorCode>& errors) : errors_(errors) {}
  kj::Promise<void> done(DoneContext context) override {
    for (auto d : context.getParams().getCalls()) {
      if (d.isError()) errors_.push_back(d.getError().getCode());
      if (d.isValue() && d.getValue().isError()) errors_.push_back(d.getValue().getError().getCode());
    }
    return kj::READY_NOW;
  }

 private:
  std::vector<wire::ErrorCode>& errors_;
};

}  // namespace

TEST_CASE("malformed frames are closed and logged once each while others are served", "[hostile]") {
  small_asan_quarantine();
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto agent = c.create_agent("EchoAgent", "steady");
  normal_round_trip(agent, 0);
  const auto rss_before = rss_of(s->pid());

  struct Case {
    std::string what;
    std::string bytes;
    std::string reason;  // in the server's log line
  };
  std::vector<Case> cases;
  for (std::uint32_t seed = 1; seed <= 8; ++seed)
    cases.push_back({"random bytes " + std::to_string(seed), random_bytes(seed, 4096), ""});
  // One segment of 64 words, of which 8 arrive before the client stops sending.
  cases.push_back({"a truncated frame", le32(0) + le32(64) + std::string(64, 'x'), "bad frame: cut short"});
  // 2^32 - 1 segments claimed (the count is stored minus one).
  cases.push_back({"a frame claiming 4 billion segments", le32(0xFFFFFFFEu) + le32(1) + std::string(64, '\0'),
                   "too many segments"});
  cases.push_back({"a frame claiming a 16 GiB segment", le32(0) + le32(0x7FFFFFFFu) + std::string(64, '\0'),
                   "too large"});
  // A well-formed RPC message the protocol does not allow: a Return for a question never asked.
  cases.push_back({"a Return for a question never asked", stray_return(), "protocol error"});

  std::vector<std::unique_ptr<RawSocket>> sockets;
  int round = 1;
  for (const auto& k : cases) {
    INFO(k.what);
    auto sock = std::make_unique<RawSocket>(s->port());
    sock->send_all(k.bytes);  // may be cut short by the server closing first
    sock->end_writing();
    CHECK(sock->wait_closed(10s));
    normal_round_trip(agent, round++);
    const std::string who = "closing connection from " + sock->peer_name() + ":";
    CHECK(wait_until([&] { return count_of(s->stderr_text(), who) == 1; }, 10s));
    if (!k.reason.empty()) {
      auto log = s->stderr_text();
      auto at = log.find(who);
      REQUIRE(at != std::string::npos);
      CHECK(log.substr(at, log.find('\n', at) - at).find(k.reason) != std::string::npos);
    }
    sockets.push_back(std::move(sock));
  }
  // Nothing claimed was allocated: the 16 GiB and 4-billion-segment frames left no trace.
  CHECK(rss_of(s->pid()).peak_kib < rss_before.peak_kib + kSlack * 64 * 1024);
  // Logged once each, and nothing else logged as an error.
  for (const auto& sock : sockets)
    CHECK(count_of(s->stderr_text(), "closing connection from " + sock->peer_name() + ":") == 1);
  CHECK(error_lines(s->stderr_text()) == 0);
  normal_round_trip(agent, round);
  // Clients that go away, with calls in flight or not, are not logged.
  for (int i = 0; i < 3; ++i) {
    auto other = s->connect();
    auto a = other.create_agent("EchoAgent");
    normal_round_trip(a, i);
    (void)a.reply(Msg("user", "left behind"));
  }
  auto last = s->connect();
  auto a = last.create_agent("EchoAgent");
  normal_round_trip(a, 99);
  CHECK(count_of(s->stderr_text(), "closing connection from") == sockets.size());
}

TEST_CASE("deeply nested values fail alone with a clear error", "[hostile]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto agent = c.create_agent("EchoAgent", "steady");
  RawRpc raw(s->port());

  // createAgent with args 100 lists deep (within what Cap'n Proto reads, past what a value may
  // be): bad_request naming the limit; 1000 deep (past what Cap'n Proto reads): refused as
  // well. The connection goes on.
  for (int depth : {100, 1000}) {
    INFO(depth);
    auto create = raw.server.createAgentRequest();
    create.setClassName("EchoAgent");
    write_nested(create.initArgs(), depth);
    std::string why;
    try {
      auto answer = create.send().wait(raw.io.waitScope);
      REQUIRE(answer.hasError());
      CHECK(answer.getError().getCode() == wire::ErrorCode::BAD_REQUEST);
      why = answer.getError().getMessage().cStr();
      CHECK(why.find("nested deeper than 64 levels") != std::string::npos);
    } catch (const kj::Exception& e) {
      why = e.getDescription().cStr();
    }
    CHECK(why.find("nest") != std::string::npos);
    raw.server.pingRequest().send().wait(raw.io.waitScope);  // the connection still serves
  }

  // The same inside a Session.submit: that call fails with bad_request, its neighbours run.
  std::vector<wire::ErrorCode> errors;
  auto open = raw.server.sessionRequest();
  open.setSink(kj::heap<SinkCounter>(errors));
  auto session = open.send().getSession();
  auto submit = session.submitRequest();
  auto calls = submit.initCalls(2);
  calls[0].setTicket(1);
  calls[0].setKind(wire::CallKind::METHOD);
  calls[0].setAgentId(agent.id().c_str());
  calls[0].setMethod("ping");
  write_nested(calls[0].initArgs(), 1000);
  calls[1].setTicket(2);
  calls[1].setKind(wire::CallKind::METHOD);
  calls[1].setAgentId(agent.id().c_str());
  calls[1].setMethod("ping");
  submit.send().wait(raw.io.waitScope);
  auto& timer = raw.io.provider->getTimer();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (errors.size() < 1 && std::chrono::steady_clock::now() < deadline)
    timer.afterDelay(2 * kj::MILLISECONDS).wait(raw.io.waitScope);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == wire::ErrorCode::BAD_REQUEST);

  // A submit of more calls than one may carry (70,000 empty ones: a few bytes on the wire each)
  // is refused whole, saying why; the session goes on.
  auto flood = session.submitRequest();
  flood.initCalls(70000);
  std::string refused;
  try {
    flood.send().wait(raw.io.waitScope);
  } catch (const kj::Exception& e) {
    refused = e.getDescription().cStr();
  }
  CHECK(refused.find("more than the 65536 one submit may carry") != std::string::npos);
  CHECK(errors.size() == 1);

  // Model configs nested 100,000 levels deep, as YAML and as JSON: config_error, no crash.
  for (const std::string& doc : {std::string(100000, '['), "- " + std::string(100000, '{')}) {
    try {
      c.set_model_configs(doc);
      FAIL("accepted a nested document");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::config_error);
    }
  }
  normal_round_trip(agent, 1);
}

TEST_CASE("a result nested deeper than a value may be fails alone, and its neighbours finish", "[hostile]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto deep = c.create_agent("DeepAgent", "deep");
  auto steady = c.create_agent("EchoAgent", "steady");
  normal_round_trip(steady, 0);
  auto nested = [](int depth, const char* kind) { return Value{{"depth", depth}, {"kind", kind}}; };
  // Issued together: they travel in one Session.submit and their answers in one CallSink.done.
  auto lists = deep.reply(Msg("user", nested(64, "list")));
  auto objects = deep.reply(Msg("user", nested(64, "object")));
  auto too_deep = deep.reply(Msg("user", nested(65, "object")));
  auto far_too_deep = deep.reply(Msg("user", nested(20000, "list")));
  auto before = steady.reply(Msg("user", "before"));
  auto method_deep = deep.call_async("deep", nested(100, "object"));
  auto after = steady.reply(Msg("user", "after"));

  // Values nested as deep as the limit (64) arrive whole.
  CHECK(depth_of(lists.get(10s).content) == 64);
  CHECK(depth_of(objects.get(10s).content) == 64);
  // Deeper ones fail their own call, naming the limit.
  for (const auto* p : {&too_deep, &far_too_deep, &method_deep}) {
    auto e = error_of([&] { p->get(10s); });
    CHECK(e.code() == ErrorCode::bad_request);
    CHECK_THAT(e.message(), Catch::Matchers::Contains("nested deeper than 64 levels"));
    CHECK(e.agent_id() == deep.id());
  }
  // The calls beside them finish.
  CHECK(before.get(10s).content.get<std::string>().find("before") != std::string::npos);
  CHECK(after.get(10s).content.get<std::string>().find("after") != std::string::npos);
  auto e = error_of([&] { deep.call("deep", nested(65, "list")); });
  CHECK(e.code() == ErrorCode::bad_request);
  CHECK(depth_of(deep.call("deep", nested(64, "list"))) == 64);

  // The client refuses to send what the server would refuse, at once.
  Value too_deep_arg = "bottom";
  for (int i = 0; i < 65; ++i) too_deep_arg = Value::array({std::move(too_deep_arg)});
  auto refused = error_of([&] { steady.reply(Msg("user", too_deep_arg)).get(10s); });
  CHECK(refused.code() == ErrorCode::bad_request);
  CHECK_THAT(refused.message(), Catch::Matchers::Contains("nested deeper than 64 levels"));

  // The server refuses it too, from a client that sends it anyway (a value 100 lists deep is
  // within what Cap'n Proto reads, past what a value may be): that call alone.
  RawRpc raw(s->port());
  std::vector<wire::ErrorCode> errors;
  auto open = raw.server.sessionRequest();
  open.setSink(kj::heap<SinkCounter>(errors));
  auto session = open.send().getSession();
  auto submit = session.submitRequest();
  auto calls = submit.initCalls(2);
  for (unsigned i = 0; i < 2; ++i) {
    calls[i].setTicket(i + 1);
    calls[i].setKind(wire::CallKind::METHOD);
    calls[i].setAgentId(steady.id().c_str());
    calls[i].setMethod("ping");
  }
  write_nested(calls[0].initArgs(), 100);
  submit.send().wait(raw.io.waitScope);
  auto& timer = raw.io.provider->getTimer();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (errors.size() < 1 && std::chrono::steady_clock::now() < deadline)
    timer.afterDelay(2 * kj::MILLISECONDS).wait(raw.io.waitScope);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == wire::ErrorCode::BAD_REQUEST);
  normal_round_trip(steady, 1);
  CHECK(error_lines(s->stderr_text()) == 0);
}

TEST_CASE("text that is not UTF-8 is refused where it enters the server", "[hostile]") {
  auto s = ServerProcess::start(standard_args());
  auto c = s->connect();
  auto steady = c.create_agent("EchoAgent", "steady");
  RawRpc raw(s->port());
  const std::string bad = "caf\xc3 \xff";  // a character cut short, then a byte that starts none

  // createAgent with a name, class name or id that is not UTF-8: bad_request naming the field.
  for (const char* field : {"name", "class", "id"}) {
    INFO(field);
    auto create = raw.server.createAgentRequest();
    create.setClassName(std::string(field) == "class" ? bad : std::string("EchoAgent"));
    create.setName(std::string(field) == "name" ? bad : std::string("fine"));
    create.setAgentId(std::string(field) == "id" ? bad : std::string());
    auto answer = create.send().wait(raw.io.waitScope);
    REQUIRE(answer.hasError());
    CHECK(answer.getError().getCode() == wire::ErrorCode::BAD_REQUEST);
    std::string why = answer.getError().getMessage().cStr();
    CHECK_THAT(why, Catch::Matchers::Contains("not UTF-8") && Catch::Matchers::Contains("byte 3"));
  }

  // In a Session.submit: a reply whose content holds such text, a method of such a name, a key
  // of the args: each fails alone; the one good call beside them runs.
  std::vector<wire::ErrorCode> errors;
  auto open = raw.server.sessionRequest();
  open.setSink(kj::heap<SinkCounter>(errors));
  auto session = open.send().getSession();
  auto submit = session.submitRequest();
  auto calls = submit.initCalls(4);
  calls[0].setTicket(1);
  calls[0].setKind(wire::CallKind::REPLY);
  calls[0].setAgentId(steady.id().c_str());
  calls[0].setCallId("utf8-reply-1");
  calls[0].setReport(true);
  auto msg = calls[0].initInput().initMsg();
  msg.setName("user");
  msg.initContent().initList(1)[0].setText(bad);
  for (unsigned i = 1; i < 4; ++i) {
    calls[i].setTicket(i + 1);
    calls[i].setKind(wire::CallKind::METHOD);
    calls[i].setAgentId(steady.id().c_str());
    calls[i].setMethod("ping");
  }
  calls[1].setMethod(bad);
  calls[2].initArgs().initObject(1)[0].setKey(bad);
  submit.send().wait(raw.io.waitScope);
  auto& timer = raw.io.provider->getTimer();
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (errors.size() < 3 && std::chrono::steady_clock::now() < deadline)
    timer.afterDelay(2 * kj::MILLISECONDS).wait(raw.io.waitScope);
  REQUIRE(errors.size() == 3);
  for (auto code : errors) CHECK(code == wire::ErrorCode::BAD_REQUEST);

  // An agent whose answer holds such text: that call fails, naming it; nothing was stored.
  auto deep = c.create_agent("DeepAgent", "utf8");
  auto e = error_of([&] { deep.reply(Msg("user", Value{{"bad_utf8", true}})).get(10s); });
  CHECK(e.code() == ErrorCode::bad_request);
  CHECK_THAT(e.message(), Catch::Matchers::Contains("not UTF-8"));
  // The client refuses to send such text in the first place.
  auto refused = error_of([&] { c.create_agent("EchoAgent", bad); });
  CHECK(refused.code() == ErrorCode::bad_request);

  // What the server holds can all be given back.
  for (const auto& a : c.list_agents()) {
    CHECK(utf8_problem(a.id).empty());
    CHECK(utf8_problem(a.name).empty());
  }
  for (const auto& m : steady.memory()) CHECK(msg_problem(m).empty());
  normal_round_trip(steady, 1);
}

TEST_CASE("thousands of idle connections do not stop the server serving", "[hostile]") {
  const rlim_t limit = raise_fd_limit();
  const std::size_t n = static_cast<std::size_t>(std::min<rlim_t>(3000, limit > 400 ? limit - 200 : 0));
  REQUIRE(n >= 900);  // the test means thousands; a hard limit under 1100 cannot show it
  small_asan_quarantine();
  auto s = ServerProcess::start(standard_args());  // inherits the raised limit (and raises its own)
  auto c = s->connect();
  auto agent = c.create_agent("EchoAgent", "steady");
  normal_round_trip(agent, 0);
  const auto before = rss_of(s->pid());

  std::vector<std::unique_ptr<RawSocket>> idle;
  for (std::size_t i = 0; i < n; ++i) {
    idle.push_back(std::make_unique<RawSocket>(s->port()));
    if (i % 500 == 0) normal_round_trip(agent, static_cast<int>(i) + 1);
  }
  // A new client is accepted behind all of them and served.
  auto late = s->connect();
  CHECK(late.create_agent("EchoAgent")
            .reply(Msg("user", "late"))
            .get(10s)
            .content.get<std::string>()
            .find("late") != std::string::npos);
  // Idle connections cost little: well under 64 KiB each.
  const auto during = rss_of(s->pid());
  CHECK(during.now_kib < before.now_kib + kSlack * n * 64);
  idle.clear();
  normal_round_trip(agent, 1);
  CHECK(error_lines(s->stderr_text()) == 0);
}

TEST_CASE("a client that stops reading is closed at its backlog limit, others go on", "[hostile]") {
  small_asan_quarantine();
  auto s = ServerProcess::start(standard_args({"--max-client-backlog", "16"}));
  auto c = s->connect();
  auto agent = c.create_agent("EchoAgent", "big-memory");
  // An agent whose memory is 8 MiB: every memory call answers 8 MiB.
  for (int i = 0; i < 8; ++i) agent.observe(Msg("user", std::string(1 << 20, 'm')));
  REQUIRE(agent.memory().size() == 8);
  auto steady = c.create_agent("EchoAgent", "steady");
  normal_round_trip(steady, 0);
  const auto before = rss_of(s->pid());

  // 64 memory calls (512 MiB of answers) from a client that then never reads again.
  RawRpc raw(s->port());
  std::vector<wire::ErrorCode> errors;
  auto open = raw.server.sessionRequest();
  open.setSink(kj::heap<SinkCounter>(errors));
  auto session = open.send().getSession();
  auto submit = session.submitRequest();
  auto calls = submit.initCalls(64);
  for (unsigned i = 0; i < 64; ++i) {
    calls[i].setTicket(i + 1);
    calls[i].setKind(wire::CallKind::MEMORY);
    calls[i].setAgentId(agent.id().c_str());
  }
  submit.send().wait(raw.io.waitScope);  // from here on, raw's loop never runs again

  const std::string closing = "closing connection from ";
  CHECK(
      wait_until([&] { return s->stderr_text().find("call completions unread") != std::string::npos; }, 30s));
  normal_round_trip(steady, 1);
  auto log = s->stderr_text();
  CHECK(count_of(log, "call completions unread") == 1);
  CHECK(count_of(log, closing) == 1);
  // The 512 MiB were never all held: the peak stays within a few backlogs of where it was.
  CHECK(rss_of(s->pid()).peak_kib < before.peak_kib + kSlack * 160 * 1024);
  normal_round_trip(steady, 2);
}
