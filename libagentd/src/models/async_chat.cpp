// chat_async / stream_async for any ChatModel: its own asynchronous path, or the blocking call on
// the worker pool.
#include "chat_models.h"

#include <optional>

namespace agentd::detail {

kj::Promise<ChatResponse> chat_async(std::shared_ptr<ChatModel> model, AsyncHttp& http,
                                     const std::vector<Msg>& messages, const ChatOptions& options) {
  if (auto* async = dynamic_cast<AsyncChatModel*>(model.get())) {
    return async->chat_async(http, messages, options).attach(kj::mv(model));
  }
  auto result =
      std::make_shared<std::optional<ChatResponse>>();  // written on the worker, read on the loop after
  return http
      .offload([model, messages, options, result](const AsyncHttp::Emit&) {
        *result = model->chat(messages, options);
      })
      .then([result]() { return std::move(**result); });
}

kj::Promise<ChatResponse> stream_async(std::shared_ptr<ChatModel> model, AsyncHttp& http,
                                       const std::vector<Msg>& messages, ChunkCallback on_chunk,
                                       const ChatOptions& options) {
  if (auto* async = dynamic_cast<AsyncChatModel*>(model.get())) {
    return async->stream_async(http, messages, std::move(on_chunk), options).attach(kj::mv(model));
  }
  auto result = std::make_shared<std::optional<ChatResponse>>();
  return http
      .offload([model, messages, options,
                result](const AsyncHttp::Emit& emit) { *result = model->stream(messages, emit, options); },
               std::move(on_chunk))
      .then([result]() { return std::move(**result); });
}

}  // namespace agentd::detail
