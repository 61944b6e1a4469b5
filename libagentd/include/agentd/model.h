// agentd::ChatModel: a configured model endpoint, as agents see it (Agent::model("config_name")).
// Chat types (openai_chat, anthropic_chat, gemini_chat, ...) answer chat() and stream(); embedding
// types (openai_embedding, ollama_embedding, ...) answer embed(). Asking a model for what its type
// does not do throws agentd::Error(model_error) naming the config and its model_type.
#pragma once

#include <agentd/msg.h>
#include <agentd/task.h>
#include <agentd/value.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd {

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t total_tokens = 0;
};

// The model use of one agent call (Placeholder::usage(), TraceSpan): the model calls the agent
// made while the call ran, failed ones included, and the tokens they reported.
struct CallUsage {
  std::uint64_t model_calls = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;

  bool empty() const { return model_calls == 0 && prompt_tokens == 0 && completion_tokens == 0; }
  friend bool operator==(const CallUsage&, const CallUsage&) = default;
};

struct ChatOptions {
  Value generate_args = Value::object();             // merged over the config's generate_args
  Value tools = Value::array();                      // OpenAI-style tool definitions, if any
  std::optional<std::chrono::milliseconds> timeout;  // per call; the config's timeout otherwise
};

// What chat() returns: the assistant message (tool calls, if any, in metadata["tool_calls"]),
// the usage the endpoint reported, and how long the call took.
struct ChatResponse {
  Msg msg;
  Usage usage;
  std::chrono::milliseconds latency{0};
};

struct EmbedOptions {
  Value generate_args = Value::object();             // merged over the config's generate_args
  std::optional<std::chrono::milliseconds> timeout;  // per call; the config's timeout otherwise
};

// What embed() returns: one vector per input text, in the order given, and the usage the
// endpoint reported (prompt_tokens; counted like chat tokens in the model's usage counters).
struct EmbeddingResponse {
  std::vector<std::vector<double>> embeddings;
  Usage usage;
  std::chrono::milliseconds latency{0};
};

// Thread-safe: agents on different worker threads may share one ChatModel.
// Failures throw agentd::Error with code model_error naming the config, the HTTP status and the
// endpoint's message (never the API key).
class ChatModel {
 public:
  virtual ~ChatModel() = default;

  virtual const std::string& config_name() const = 0;
  virtual const std::string& model_type() const = 0;

  virtual ChatResponse chat(const std::vector<Msg>& messages, const ChatOptions& options = {}) = 0;

  // Streams the answer: on_chunk receives each piece of text as it arrives; returns the whole answer.
  virtual ChatResponse stream(const std::vector<Msg>& messages,
                              const std::function<void(std::string_view chunk)>& on_chunk,
                              const ChatOptions& options = {}) = 0;

  // chat() and stream() for asynchronous agents (agentd/task.h): `co_await m->chat_async(msgs)`.
  // HTTP model types send the request on the server's event loop (connections kept alive and
  // shared per endpoint, at most the config's max_concurrency requests at once, the rest queued)
  // and hold no thread while waiting; retries, timeouts and usage are those of chat(). A model
  // type without an asynchronous transport runs chat() on a worker thread (run_blocking).
  // on_chunk runs on the loop thread. (The defaults are `ChatOptions()`, not `{}`: GCC 12
  // destroys a braced temporary twice when a coroutine passes it to a coroutine.)
  virtual Task<ChatResponse> chat_async(std::vector<Msg> messages, ChatOptions options = ChatOptions());
  virtual Task<ChatResponse> stream_async(std::vector<Msg> messages,
                                          std::function<void(std::string_view chunk)> on_chunk,
                                          ChatOptions options = ChatOptions());

  // Embeds each text (embedding types only). The default throws model_error: "model 'name'
  // (model_type T) does not make embeddings".
  virtual EmbeddingResponse embed(const std::vector<std::string>& texts, const EmbedOptions& options = {});
};

}  // namespace agentd
