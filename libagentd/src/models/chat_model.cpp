// The ChatModel defaults for asynchronous agents: model types without an asynchronous transport
// run their blocking call on a worker thread while the coroutine waits.
#include <agentd/model.h>

#include <memory>
#include <utility>

namespace agentd {

Task<ChatResponse> ChatModel::chat_async(std::vector<Msg> messages, ChatOptions options) {
  co_return co_await run_blocking(
      [this, messages = std::move(messages), options = std::move(options)]() {
        return chat(messages, options);
      });
}

Task<ChatResponse> ChatModel::stream_async(std::vector<Msg> messages,
                                           std::function<void(std::string_view chunk)> on_chunk,
                                           ChatOptions options) {
  // Chunks arrive on the worker; each is posted to the loop, ahead of the resume (both go
  // through the loop's one bridge, in order). The alive flag drops chunks that would arrive
  // after the coroutine is gone.
  detail::AsyncLoop& loop = detail::require_async_loop("ChatModel::stream_async");
  auto sink = std::make_shared<std::function<void(std::string_view)>>(std::move(on_chunk));
  detail::AliveFlag flag;
  co_return co_await run_blocking([this, &loop, sink, alive = flag.alive,
                                   messages = std::move(messages),
                                   options = std::move(options)]() {
    return stream(
        messages,
        [&loop, sink, alive](std::string_view chunk) {
          loop.post([sink, alive, text = std::string(chunk)]() {
            if (*alive) (*sink)(text);
          });
        },
        options);
  });
}

}  // namespace agentd
