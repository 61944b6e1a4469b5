#include "connection_guard.h"

#include "value_codec.h"
#include "wire_limits.h"

#include <algorithm>
#include <cstring>

#include <capnp/rpc.capnp.h>
#include <capnp/serialize-async.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace agentd::detail {

capnp::ReaderOptions ConnectionGuard::reader_options() { return wire_reader_options(); }

namespace {

// stream's bytes with prefix before them; counts what it hands out. stream is borrowed.
class PrefixedInput final : public kj::AsyncInputStream {
 public:
  PrefixedInput(kj::AsyncInputStream& stream, kj::Array<kj::byte> prefix)
      : stream_(stream), prefix_(kj::mv(prefix)) {}
  std::size_t bytes_read() const { return read_; }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    size_t n = std::min(maxBytes, prefix_.size() - at_);
    std::memcpy(buffer, prefix_.begin() + at_, n);
    at_ += n;
    read_ += n;
    if (n >= minBytes) return n;
    return stream_.tryRead(static_cast<kj::byte*>(buffer) + n, minBytes - n, maxBytes - n)
        .then([this, n](size_t more) {
          read_ += more;
          return n + more;
        });
  }

 private:
  kj::AsyncInputStream& stream_;
  kj::Array<kj::byte> prefix_;
  std::size_t at_ = 0;
  std::size_t read_ = 0;
};

}  // namespace

ConnectionGuard::ConnectionGuard(kj::AsyncIoStream& stream, std::string peer, bool tls)
    : stream_(stream), inner_(stream), peer_(std::move(peer)), tls_(tls) {}

void ConnectionGuard::note_closing(std::string reason) {
  if (!closed_for_.empty()) return;
  closed_for_ = std::move(reason);
  spdlog::warn("closing connection from {}: {}", peer_, closed_for_);
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> ConnectionGuard::tryReadMessage(
    kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions, kj::ArrayPtr<capnp::word> scratchSpace) {
  if (!logged_in_) return read_before_login(scratchSpace);
  // The RPC system's own options are replaced by ours (it passes the network's defaults).
  return inner_.tryReadMessage(fdSpace, reader_options(), scratchSpace)
      .catch_([this](kj::Exception&& e) -> kj::Maybe<capnp::MessageReaderAndFds> {
        failed_read(kj::mv(e), false);
      });
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> ConnectionGuard::read_before_login(
    kj::ArrayPtr<capnp::word> scratchSpace) {
  if (pre_login_bytes_ + sizeof(capnp::word) > kPreLoginBytes) {
    note_closing(
        fmt::format("sent {} bytes without logging in (at most {} KiB are read before a "
                    "login is accepted)",
                    pre_login_bytes_, kPreLoginBytes / 1024));
    return KJ_EXCEPTION(FAILED, "too much sent before logging in");
  }
  budgeted_read_ = false;
  auto first = kj::heapArray<kj::byte>(sizeof(capnp::word));
  kj::byte* at = first.begin();
  return stream_.tryRead(at, first.size(), first.size())
      .then([this, first = kj::mv(first),
             scratchSpace](size_t n) mutable -> kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> {
        if (n == 0) return kj::Maybe<capnp::MessageReaderAndFds>(nullptr);  // a clean end
        if (n < first.size()) KJ_FAIL_REQUIRE("Premature EOF.");
        if (logged_in_) return read_rest(kj::mv(first), scratchSpace);
        // Cap'n Proto dispatches a call one turn after reading it (evalLater): a login read just
        // before this frame runs first, so calls pipelined on the login are read as logged in.
        return kj::evalLater([this, first = kj::mv(first), scratchSpace]() mutable {
          return read_rest(kj::mv(first), scratchSpace);
        });
      })
      .catch_([this](kj::Exception&& e) -> kj::Maybe<capnp::MessageReaderAndFds> {
        failed_read(kj::mv(e), budgeted_read_);
      });
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> ConnectionGuard::read_rest(
    kj::Array<kj::byte> first, kj::ArrayPtr<capnp::word> scratchSpace) {
  auto options = reader_options();
  const bool budgeted = !logged_in_;
  if (budgeted) options.traversalLimitInWords = (kPreLoginBytes - pre_login_bytes_) / sizeof(capnp::word);
  auto input = kj::heap<PrefixedInput>(stream_, kj::mv(first));
  PrefixedInput& in = *input;
  budgeted_read_ = budgeted;
  return capnp::tryReadMessage(in, options, scratchSpace)
      .then([this, input = kj::mv(input),
             budgeted](kj::Maybe<kj::Own<capnp::MessageReader>> m) -> kj::Maybe<capnp::MessageReaderAndFds> {
        if (budgeted) pre_login_bytes_ += input->bytes_read();
        KJ_IF_MAYBE (reader, m) {
          return capnp::MessageReaderAndFds{kj::mv(*reader), nullptr};
        }
        KJ_FAIL_REQUIRE("Premature EOF.");  // the first word had come
      });
}

void ConnectionGuard::failed_read(kj::Exception&& e, bool budgeted) {
  std::string why = e.getDescription().cStr();
  // A reset or an error on the socket is the peer's or the network's doing, not a bad
  // message; an end of stream inside a frame is a frame cut short, which is.
  const bool cut_short = why.find("Premature EOF") != std::string::npos ||
                         why.find("disconnected prematurely") != std::string::npos;
  spdlog::debug("reading from {} failed: {}", peer_, why);
  if (cut_short && tls_ && closed_for_.empty()) {
    spdlog::debug(
        "{} went away inside a frame (a TLS peer closing while it wrote; not a bad "
        "frame)",
        peer_);
    kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "the TLS peer went away inside a frame"));
  }
  if (budgeted && why.find("too large") != std::string::npos)
    note_closing(
        fmt::format("bad frame before logging in: too large: more than the {} bytes left "
                    "of the {} KiB a connection may send before its login is accepted "
                    "(log in first; --max-message-bytes applies after)",
                    kPreLoginBytes - pre_login_bytes_, kPreLoginBytes / 1024));
  else if (cut_short)
    note_closing("bad frame: cut short (the peer closed its end inside a frame)");
  else if (e.getType() != kj::Exception::Type::DISCONNECTED)
    note_closing("bad frame: " + why);
  kj::throwFatalException(kj::mv(e));
}

void ConnectionGuard::check_abort(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  if (!closed_for_.empty() || segments.size() == 0) return;
  try {
    capnp::SegmentArrayMessageReader reader(segments);
    auto msg = reader.getRoot<capnp::rpc::Message>();
    // An abort over a disconnect (the peer went away while something was in flight) is no
    // fault of the peer's messages; any other abort is a protocol error.
    if (msg.isAbort() && msg.getAbort().getType() != capnp::rpc::Exception::Type::DISCONNECTED)
      note_closing("protocol error: " + std::string(msg.getAbort().getReason().cStr()));
  } catch (const kj::Exception&) {
    // Not ours to judge: the RPC system built it.
  }
}

kj::Promise<void> ConnectionGuard::writeMessage(
    kj::ArrayPtr<const int> fds, kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  check_abort(segments);
  return inner_.writeMessage(fds, segments);
}

kj::Promise<void> ConnectionGuard::writeMessages(
    kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) {
  for (auto m : messages) check_abort(m);
  return inner_.writeMessages(messages);
}

}  // namespace agentd::detail
