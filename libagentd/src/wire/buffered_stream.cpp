#include "buffered_stream.h"

#include <cstring>

namespace agentd::detail {

size_t BufferedStream::take(kj::byte* out, size_t max) {
  const size_t n = kj::min(max, end_ - begin_);
  if (n > 0) std::memcpy(out, buffer_.begin() + begin_, n);
  begin_ += n;
  if (begin_ == end_) begin_ = end_ = 0;
  return n;
}

kj::Promise<size_t> BufferedStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  auto* out = static_cast<kj::byte*>(buffer);
  const size_t got = take(out, maxBytes);
  if (got >= minBytes) return got;
  out += got;
  minBytes -= got;
  maxBytes -= got;
  // Buffered bytes are all served: the rest comes from the socket.
  if (maxBytes >= kBufferBytes) {
    return inner_->tryRead(out, minBytes, maxBytes).then([got](size_t n) { return got + n; });
  }
  if (buffer_.size() == 0) buffer_ = kj::heapArray<kj::byte>(kBufferBytes);
  return inner_->tryRead(buffer_.begin(), minBytes, kBufferBytes).then([this, out, got, maxBytes](size_t n) {
    end_ = n;
    return got + take(out, maxBytes);
  });
}

}  // namespace agentd::detail
