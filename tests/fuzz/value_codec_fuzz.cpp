// Fuzzes the Value codec (libagentd/src/wire/value_codec): the input is read as a Cap'n Proto
// message whose root is a Value, a Msg and an Error in turn. Decoding must either succeed or
// throw kj::Exception (a malformed message); a decoded value must survive a round trip: encoding
// it and decoding again gives the same bytes as the first encoding.
#include "fuzz_support.h"
#include "value_codec.h"

#include <capnp/message.h>

using namespace agentd;
using namespace agentd::detail;

namespace {

kj::Array<capnp::word> encode(const Value& v) {
  capnp::MallocMessageBuilder b;
  write_value(v, b.initRoot<wire::Value>());
  return capnp::messageToFlatArray(b);
}

kj::Array<capnp::word> encode(const Msg& m) {
  capnp::MallocMessageBuilder b;
  write_msg(m, b.initRoot<wire::Msg>());
  return capnp::messageToFlatArray(b);
}

bool same(const kj::Array<capnp::word>& a, const kj::Array<capnp::word>& b) {
  return a.size() == b.size() && std::memcmp(a.begin(), b.begin(), a.size() * sizeof(capnp::word)) == 0;
}

template <typename Root, typename Read, typename Encode>
void round_trip(const kj::Array<capnp::word>& words, Read read, Encode enc) {
  decltype(read(std::declval<typename Root::Reader>())) first;
  try {
    capnp::FlatArrayMessageReader reader(words, fuzz::fuzz_reader_options());
    first = read(reader.getRoot<Root>());
  } catch (const kj::Exception&) {
    return;  // malformed message: refused, which is what must happen
  } catch (const Error&) {
    return;  // nested deeper than kMaxValueDepth or text that is not UTF-8: refused as well
  }
  (void)approx_wire_size(first);
  auto once = enc(first);
  capnp::FlatArrayMessageReader again(once);
  auto second = read(again.getRoot<Root>());
  if (!same(once, enc(second))) fuzz::invariant_failed("encode(decode(encode(v))) != encode(v)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto words = fuzz::aligned_words(data, size);
  round_trip<wire::Value>(
      words, [](wire::Value::Reader r) { return read_value(r); }, [](const Value& v) { return encode(v); });
  round_trip<wire::Msg>(
      words, [](wire::Msg::Reader r) { return read_msg(r); }, [](const Msg& m) { return encode(m); });
  try {
    capnp::FlatArrayMessageReader reader(words, fuzz::fuzz_reader_options());
    Error e = read_error(reader.getRoot<wire::Error>());
    capnp::MallocMessageBuilder b;
    write_error(e, b.initRoot<wire::Error>());
    if (read_error(b.getRoot<wire::Error>().asReader()).code() != e.code())
      fuzz::invariant_failed("error code changed in a round trip");
  } catch (const kj::Exception&) {
  }
  return 0;
}
