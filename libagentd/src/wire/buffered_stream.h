// BufferedStream: an AsyncIoStream wrapper whose reads take what the socket has in one system
// call and serve the next reads from it. Loop thread only.
//
// Cap'n Proto reads a frame in exact pieces (its first word, then the segment table and the
// segments), one read() each, so every RPC message costs at least two system calls to receive.
// Beneath the RPC stream this wrapper asks the socket for up to kBufferBytes at once, so a small
// frame, and the frames that arrived with it, arrive in one read(). A read asking for at least
// kBufferBytes with nothing buffered goes straight into the caller's memory (a large segment is
// not copied twice).
//
// The buffer is at most kBufferBytes per connection: what a peer that has not logged in can make
// a server hold is bounded as before (ConnectionGuard's budget counts what the RPC stream reads).
#pragma once

#include "forwarding_stream.h"

#include <cstddef>

namespace agentd::detail {

class BufferedStream final : public ForwardingStream {
 public:
  static constexpr std::size_t kBufferBytes = 8192;

  explicit BufferedStream(kj::Own<kj::AsyncIoStream> inner) : ForwardingStream(kj::mv(inner)) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;

 private:
  // Copies up to max buffered bytes to out; returns how many.
  size_t take(kj::byte* out, size_t max);

  kj::Array<kj::byte> buffer_;  // allocated at the first small read
  size_t begin_ = 0;            // buffer_[begin_, end_) is read from the socket, not yet served
  size_t end_ = 0;
};

}  // namespace agentd::detail
