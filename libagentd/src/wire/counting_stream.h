// CountingStream: an AsyncIoStream wrapper that adds the bytes it reads and writes to two
// counters (loop thread only). Servers use it to report bytes per connection kind.
#pragma once

#include <kj/async-io.h>

#include <cstdint>

namespace agentd::detail {

class CountingStream final : public kj::AsyncIoStream {
 public:
  // in and out are borrowed and outlive the stream.
  CountingStream(kj::Own<kj::AsyncIoStream> inner, std::uint64_t& in, std::uint64_t& out)
      : inner_(kj::mv(inner)), in_(&in), out_(&out) {}

  // Counts into other counters from now on, moving what was counted so far over to them
  // (a server learns only after accepting a connection that a peer server is on the other end).
  void retarget(std::uint64_t& in, std::uint64_t& out) {
    if (in_ == &in) return;
    *in_ -= own_in_;
    *out_ -= own_out_;
    in += own_in_;
    out += own_out_;
    in_ = &in;
    out_ = &out;
  }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    return inner_->tryRead(buffer, minBytes, maxBytes).then([this](size_t n) {
      *in_ += n;
      own_in_ += n;
      return n;
    });
  }
  kj::Promise<void> write(const void* buffer, size_t size) override {
    *out_ += size;
    own_out_ += size;
    return inner_->write(buffer, size);
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    for (auto p : pieces) {
      *out_ += p.size();
      own_out_ += p.size();
    }
    return inner_->write(pieces);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(struct sockaddr* addr, uint* length) override { inner_->getpeername(addr, length); }

 private:
  kj::Own<kj::AsyncIoStream> inner_;
  std::uint64_t* in_;
  std::uint64_t* out_;
  std::uint64_t own_in_ = 0;  // this connection's bytes
  std::uint64_t own_out_ = 0;
};

}  // namespace agentd::detail
