// Fuzzes the metrics endpoint's request handling (libagentd/src/server/metrics.cpp, on kj-http):
// each input is the whole byte stream of one client connection, sent over an in-memory pipe
// to a MetricsEndpoint whose listener hands out that pipe. The connection must end (the endpoint
// closes after one response, or drops it at its timeout, which the fuzzer's manual timer
// reaches), and whatever comes back is an HTTP/1.1 response or nothing.
#include "fuzz_support.h"
#include "metrics.h"

#include <kj/async.h>
#include <kj/timer.h>

#include <deque>
#include <string_view>

using namespace agentd::detail;

namespace {

// A listener whose connections are the server ends of in-memory pipes the fuzzer makes.
class PipeReceiver final : public kj::ConnectionReceiver {
 public:
  kj::Promise<kj::Own<kj::AsyncIoStream>> accept() override {
    if (!ready_.empty()) {
      auto s = kj::mv(ready_.front());
      ready_.pop_front();
      return kj::mv(s);
    }
    auto paf = kj::newPromiseAndFulfiller<kj::Own<kj::AsyncIoStream>>();
    waiting_ = kj::mv(paf.fulfiller);
    return kj::mv(paf.promise);
  }
  uint getPort() override { return 0; }

  void push(kj::Own<kj::AsyncIoStream> stream) {
    KJ_IF_MAYBE (w, waiting_) {
      auto f = kj::mv(*w);
      waiting_ = nullptr;
      f->fulfill(kj::mv(stream));
      return;
    }
    ready_.push_back(kj::mv(stream));
  }

 private:
  kj::Maybe<kj::Own<kj::PromiseFulfiller<kj::Own<kj::AsyncIoStream>>>> waiting_;
  std::deque<kj::Own<kj::AsyncIoStream>> ready_;
};

struct Harness {
  kj::EventLoop loop;
  kj::WaitScope ws{loop};
  kj::TimerImpl timer{kj::origin<kj::TimePoint>()};
  PipeReceiver* receiver = nullptr;
  kj::Own<MetricsEndpoint> endpoint;

  Harness() {
    auto r = kj::heap<PipeReceiver>();
    receiver = r.get();
    endpoint = kj::heap<MetricsEndpoint>(kj::mv(r), timer, [] {
      MetricsSnapshot s;
      s.agents = 3;
      s.calls_by_class["EchoAgent"] = {5, 1};
      return render_metrics(s);
    });
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Harness* h = new Harness;  // one loop for the whole run (never destroyed)
  auto pipe = kj::newTwoWayPipe();
  h->receiver->push(kj::mv(pipe.ends[0]));
  kj::Own<kj::AsyncIoStream> client = kj::mv(pipe.ends[1]);
  auto* c = client.get();
  auto sent = c->write(data, size)
                  .then([c]() { c->shutdownWrite(); })
                  .catch_([](kj::Exception&&) {})  // the endpoint closed before reading it all
                  .eagerlyEvaluate(nullptr);
  auto response = c->readAllText().catch_([](kj::Exception&&) { return kj::String(); });
  int rounds = 0;
  while (!response.poll(h->ws)) {
    // Nothing left to run and still open: only the request timeout can end it.
    if (++rounds > 3) agentd::fuzz::invariant_failed("a metrics connection outlived its timeout");
    h->timer.advanceTo(h->timer.now() + MetricsEndpoint::kRequestTimeout + 1 * kj::SECONDS);
  }
  kj::String text = response.wait(h->ws);
  std::string_view got(text.begin(), text.size());
  if (!got.empty() && got.substr(0, 9) != "HTTP/1.1 ")
    agentd::fuzz::invariant_failed("the endpoint answered something other than an HTTP/1.1 response");
  return 0;
}
