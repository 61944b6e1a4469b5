// Writes the binary seed inputs of the fuzz corpus (Cap'n Proto messages) into
// corpus/value_codec_fuzz and corpus/session_submit_fuzz under the directory given. Run by hand
// when the schema changes; its output is committed.
#include "value_codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using namespace agentd;
using namespace agentd::detail;

namespace {

void save(const std::filesystem::path& file, capnp::MessageBuilder& b) {
  auto words = capnp::messageToFlatArray(b);
  auto bytes = words.asBytes();
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.begin()), static_cast<std::streamsize>(bytes.size()));
}

Value sample_value() {
  return Value{{"text", "hello"},
               {"n", -3},
               {"u", 18446744073709551615ull},
               {"f", 2.5},
               {"ok", true},
               {"none", nullptr},
               {"list", Value::array({1, "two", Value::array({3.0})})},
               {"bin", Value::binary({0, 1, 2, 255})}};
}

void spec(wire::CallSpec::Builder c, std::uint64_t ticket, wire::CallKind kind, const char* agent) {
  c.setTicket(ticket);
  c.setKind(kind);
  c.setAgentId(agent);
  c.setInlineLimit(64 * 1024);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::filesystem::path dir = std::filesystem::path(argv[1]);
  {
    capnp::MallocMessageBuilder b;
    write_value(sample_value(), b.initRoot<wire::Value>());
    save(dir / "value_codec_fuzz" / "object.bin", b);
  }
  {
    capnp::MallocMessageBuilder b;
    Msg m("alice", sample_value(), "assistant");
    m.url = {"http://example.com/a"};
    m.metadata = Value{{"k", "v"}};
    write_msg(m, b.initRoot<wire::Msg>());
    save(dir / "value_codec_fuzz" / "msg.bin", b);
  }
  {
    capnp::MallocMessageBuilder b;
    write_error(Error(ErrorCode::agent_failed, "boom", "a0", "FuzzAgent", true), b.initRoot<wire::Error>());
    save(dir / "value_codec_fuzz" / "error.bin", b);
  }
  {
    // Every kind of call on the agents the fuzz server creates (a0, a1), a chain through a
    // placeholder, an unreported link and a create.
    capnp::MallocMessageBuilder b;
    auto calls = b.initRoot<wire::Session::SubmitParams>().initCalls(9);
    spec(calls[0], 1, wire::CallKind::REPLY, "a0");
    calls[0].setCallId("c1");
    write_msg(Msg("user", "hi"), calls[0].initInput().initMsg());
    spec(calls[1], 2, wire::CallKind::REPLY, "a1");
    calls[1].setCallId("c2");
    auto ref = calls[1].initInput().initPlaceholder();
    ref.setServerId("fuzz");
    ref.setCallId("c1");
    spec(calls[2], 3, wire::CallKind::OBSERVE, "a0");
    write_msg(Msg("user", sample_value()), calls[2].initInput().initMsg());
    spec(calls[3], 4, wire::CallKind::METHOD, "a0");
    calls[3].setMethod("echo");
    write_value(sample_value(), calls[3].initArgs());
    spec(calls[4], 5, wire::CallKind::METHOD, "a1");
    calls[4].setMethod("fail");
    spec(calls[5], 6, wire::CallKind::METHOD_ASYNC, "a1");
    calls[5].setMethod("echo");
    calls[5].setCallId("c3");
    spec(calls[6], 7, wire::CallKind::MEMORY, "a0");
    spec(calls[7], 8, wire::CallKind::REPLY, "a0");
    calls[7].setCallId("c4");
    calls[7].setReport(false);
    write_msg(Msg("user", "unreported"), calls[7].initInput().initMsg());
    spec(calls[8], 9, wire::CallKind::CREATE, "");
    calls[8].setClassName("FuzzAgent");
    calls[8].setName("made");
    write_value(Value{{"k", 1}}, calls[8].initArgs());
    save(dir / "session_submit_fuzz" / "all_kinds.bin", b);
  }
  {
    capnp::MallocMessageBuilder b;
    auto calls = b.initRoot<wire::Session::SubmitParams>().initCalls(2);
    spec(calls[0], 1, wire::CallKind::REPLY, "nobody");
    calls[0].setCallId("x");
    write_msg(Msg("user", "hi"), calls[0].initInput().initMsg());
    spec(calls[1], 2, wire::CallKind::CREATE, "a0");
    calls[1].setClassName("NoSuchClass");
    save(dir / "session_submit_fuzz" / "errors.bin", b);
  }
  {
    // A lone call answered in the submit's answer (answerLone).
    capnp::MallocMessageBuilder b;
    auto params = b.initRoot<wire::Session::SubmitParams>();
    params.setAnswerLone(true);
    auto call = params.initCalls(1)[0];
    spec(call, 1, wire::CallKind::REPLY, "a0");
    call.setCallId("lone");
    write_msg(Msg("user", "alone"), call.initInput().initMsg());
    save(dir / "session_submit_fuzz" / "lone.bin", b);
  }
  return 0;
}
