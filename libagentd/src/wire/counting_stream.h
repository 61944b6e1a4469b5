// CountingStream: an AsyncIoStream wrapper that adds the bytes it reads and writes to a
// ByteCount (loop thread only). Servers use it to report bytes per connection kind.
#pragma once

#include "forwarding_stream.h"

#include <cstdint>

namespace agentd::detail {

// Bytes read (in) and written (out) on some connections.
struct ByteCount {
  std::uint64_t in = 0;
  std::uint64_t out = 0;
};

// A server's bytes by the kind of connection they crossed.
struct Traffic {
  ByteCount client;  // main programs and agentctl
  ByteCount peer;    // other servers (placeholder fetches, both directions)
};

class CountingStream final : public ForwardingStream {
 public:
  // counts is borrowed and outlives the stream; so does writes_in_flight (may be null), which
  // counts the writes started on this stream and not yet finished.
  CountingStream(kj::Own<kj::AsyncIoStream> inner, ByteCount& counts, std::size_t* writes_in_flight = nullptr)
      : ForwardingStream(kj::mv(inner)), counts_(&counts), in_flight_(writes_in_flight) {}

  // Counts into other counts from now on, moving what was counted so far over to them (a server
  // learns only after accepting a connection that a peer server is on the other end).
  void retarget(ByteCount& counts) {
    if (counts_ == &counts) return;
    counts_->in -= own_.in;
    counts_->out -= own_.out;
    counts.in += own_.in;
    counts.out += own_.out;
    counts_ = &counts;
  }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    return inner_->tryRead(buffer, minBytes, maxBytes).then([this](size_t n) {
      counts_->in += n;
      own_.in += n;
      return n;
    });
  }
  kj::Promise<void> write(const void* buffer, size_t size) override {
    counts_->out += size;
    own_.out += size;
    return tracked(inner_->write(buffer, size));
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    for (auto p : pieces) {
      counts_->out += p.size();
      own_.out += p.size();
    }
    return tracked(inner_->write(pieces));
  }

 private:
  // A write counted in *in_flight_ until it finishes, fails or is cancelled. The stream's owner
  // destroys the RPC system (and so its pending writes) before the stream.
  kj::Promise<void> tracked(kj::Promise<void> write) {
    if (in_flight_ == nullptr) return write;
    ++*in_flight_;
    return write.attach(kj::defer([counter = in_flight_]() { --*counter; }));
  }

  ByteCount* counts_;
  std::size_t* in_flight_;
  ByteCount own_;  // this connection's bytes
};

}  // namespace agentd::detail
