// ChatModel::chat_async / stream_async (agentd/model.h): the coroutine form of a model call.
// A model with an asynchronous path (AsyncChatModel: the HTTP types, echo, the usage-counting
// handle agents get) runs it on the calling loop's AsyncHttp without a thread; any other model
// runs its blocking call on a worker thread while the coroutine waits.
#include <agentd/model.h>

// GCC 12 reports kj's ExceptionOr<ChatResponse> (inside kj::Canceler, used by await_kj) as
// "maybe used uninitialized" when a rejection replaces it: a false positive of its flow analysis
// through kj's Maybe; the value is constructed before any read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "async_http.h"
#include "chat_models.h"
#include "kj_await.h"

#include <memory>
#include <string>
#include <utility>

namespace agentd {

Task<ChatResponse> ChatModel::chat_async(std::vector<Msg> messages, ChatOptions options) {
  auto* async = dynamic_cast<detail::AsyncChatModel*>(this);
  detail::AsyncHttp* http = detail::current_async_http();
  if (async != nullptr && http != nullptr) {
    co_return co_await detail::await_kj(async->chat_async(*http, messages, options));
  }
  co_return co_await run_blocking([this, messages = std::move(messages), options = std::move(options)]() {
    return chat(messages, options);
  });
}

Task<ChatResponse> ChatModel::stream_async(std::vector<Msg> messages,
                                           std::function<void(std::string_view chunk)> on_chunk,
                                           ChatOptions options) {
  auto* async = dynamic_cast<detail::AsyncChatModel*>(this);
  detail::AsyncHttp* http = detail::current_async_http();
  if (async != nullptr && http != nullptr) {
    co_return co_await detail::await_kj(async->stream_async(*http, messages, std::move(on_chunk), options));
  }
  // Chunks arrive on the worker; each is posted to the loop, ahead of the resume (both go
  // through the loop's one bridge, in order). The alive flag drops chunks that would arrive
  // after the coroutine is gone.
  detail::AsyncLoop& loop = detail::require_async_loop("ChatModel::stream_async");
  auto sink = std::make_shared<std::function<void(std::string_view)>>(std::move(on_chunk));
  detail::AliveFlag flag;
  co_return co_await run_blocking([this, &loop, sink, alive = flag.alive, messages = std::move(messages),
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
