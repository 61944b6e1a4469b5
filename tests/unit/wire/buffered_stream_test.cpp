// BufferedStream: Cap'n Proto frames read through it arrive intact, small frames cost one read of
// the socket each (or less, when several arrived together) instead of one per piece, a large
// segment is read straight into the reader's memory, and the end of the stream is reported as
// the stream reported it.
#include "buffered_stream.h"

#include <capnp/message.h>
#include <capnp/serialize-async.h>
#include <capnp/serialize.h>
#include <catch2/catch.hpp>
#include <kj/async-io.h>

#include <string>
#include <vector>

using agentd::detail::BufferedStream;

namespace {

// Counts the reads asked of the stream beneath, and the largest maxBytes asked.
class ReadCounter final : public agentd::detail::ForwardingStream {
 public:
  using ForwardingStream::ForwardingStream;
  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    ++reads;
    largest_ask = kj::max(largest_ask, maxBytes);
    return inner_->tryRead(buffer, minBytes, maxBytes);
  }

  int reads = 0;
  size_t largest_ask = 0;
};

// A frame holding text.
kj::Array<capnp::word> frame(const std::string& text) {
  capnp::MallocMessageBuilder m;
  m.getRoot<capnp::AnyPointer>().setAs<capnp::Text>(capnp::Text::Reader(text.data(), text.size()));
  return capnp::messageToFlatArray(m);
}

struct Pair {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::TwoWayPipe pipe = io.provider->newTwoWayPipe();
  ReadCounter* counter = nullptr;
  kj::Own<BufferedStream> reader;
  kj::Own<kj::AsyncIoStream> writer = kj::mv(pipe.ends[1]);

  Pair() {
    auto counted = kj::heap<ReadCounter>(kj::mv(pipe.ends[0]));
    counter = counted.get();
    reader = kj::heap<BufferedStream>(kj::mv(counted));
  }
  void send(const std::vector<std::string>& texts) {
    std::vector<kj::Array<capnp::word>> frames;
    for (const auto& t : texts) frames.push_back(frame(t));
    for (const auto& f : frames) writer->write(f.asBytes().begin(), f.asBytes().size()).wait(io.waitScope);
  }
  kj::Maybe<std::string> next() {
    auto msg = capnp::tryReadMessage(*reader).wait(io.waitScope);
    KJ_IF_MAYBE (m, msg) {
      auto text = (*m)->getRoot<capnp::AnyPointer>().getAs<capnp::Text>();
      return std::string(text.cStr(), text.size());
    }
    return nullptr;
  }
};

std::string text_of(kj::Maybe<std::string> m) {
  KJ_IF_MAYBE (s, m) return *s;
  return "<end>";
}

}  // namespace

TEST_CASE("small frames read through a BufferedStream arrive intact in one socket read each at most",
          "[wire][buffered]") {
  Pair p;
  p.send({"one", "two", std::string(3000, 't')});
  CHECK(text_of(p.next()) == "one");
  CHECK(text_of(p.next()) == "two");
  CHECK(text_of(p.next()) == std::string(3000, 't'));
  // Unbuffered, Cap'n Proto reads each frame in two pieces or more: six reads at least.
  CHECK(p.counter->reads <= 3);
  p.send({"four"});
  CHECK(text_of(p.next()) == "four");
  CHECK(p.counter->reads <= 4);
}

TEST_CASE("a large frame read through a BufferedStream arrives intact, its segment read in place",
          "[wire][buffered]") {
  Pair p;
  const std::string big(1 << 20, 'b');
  auto f = frame(big);
  // Written while read: the pipe holds less than a megabyte.
  auto written = p.writer->write(f.asBytes().begin(), f.asBytes().size());
  CHECK(text_of(p.next()) == big);
  written.wait(p.io.waitScope);
  // The segment was asked for whole (into the reader's memory), not in buffer-sized pieces.
  CHECK(p.counter->largest_ask > BufferedStream::kBufferBytes);
  p.send({"after"});
  CHECK(text_of(p.next()) == "after");
}

TEST_CASE("a BufferedStream reports a clean end and a frame cut short as its stream did",
          "[wire][buffered]") {
  SECTION("the writer closes between frames: no more messages") {
    Pair p;
    p.send({"last"});
    p.writer->shutdownWrite();
    CHECK(text_of(p.next()) == "last");
    CHECK(text_of(p.next()) == "<end>");
  }
  SECTION("the writer closes mid-frame: the read fails") {
    Pair p;
    auto f = frame(std::string(100, 'x'));
    p.writer->write(f.asBytes().begin(), f.asBytes().size() - 16).wait(p.io.waitScope);
    p.writer->shutdownWrite();
    CHECK_THROWS(p.next());
  }
}
