// The model types behind make_chat_model, and what the HTTP ones share. Private to src/models.
#pragma once

#include <agentd/model.h>

#include "async_http.h"
#include "http_client.h"
#include "model_config.h"

#include <kj/async.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace agentd::detail {

// One factory per model type; `config` has been validated for that type.
std::shared_ptr<ChatModel> make_echo_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_openai_chat_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_ollama_chat_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_dashscope_chat_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_post_api_chat_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_anthropic_chat_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_gemini_chat_model(const ModelConfig& config);
std::shared_ptr<ChatModel> make_ollama_generate_model(const ModelConfig& config);
// openai_embedding, zhipuai_embedding, ollama_embedding, dashscope_text_embedding, gemini_embedding.
std::shared_ptr<ChatModel> make_embedding_model(const ModelConfig& config);

// The asynchronous path of a chat model: what chat() and stream() do, awaited on a KJ loop
// instead of blocking a thread. Implemented by the HTTP chat types (over AsyncHttp), echo (at
// once, or after its delay_ms on the loop's timer) and the usage-counting wrapper. Usage,
// retries, timeouts and errors are those of the blocking call; a failure rejects the promise
// with the agentd::Error the blocking call would throw, encoded by to_kj_exception() (decode it
// with error_from_kj()). Loop thread only: `http` belongs to the calling loop; on_chunk runs
// there. The model outlives the promise; messages and options need not (they are copied or
// used before returning). Dropping the promise cancels the call.
class AsyncChatModel {
 public:
  virtual kj::Promise<ChatResponse> chat_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                               const ChatOptions& options) = 0;
  virtual kj::Promise<ChatResponse> stream_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                                 ChunkCallback on_chunk, const ChatOptions& options) = 0;

 protected:
  ~AsyncChatModel() = default;
};

// model->chat(messages, options) awaited on the loop of `http`: through the model's AsyncChatModel
// path when it has one; otherwise the blocking call runs on http's worker pool and the promise
// resolves on the loop. Keeps `model` alive until the promise settles or is dropped.
kj::Promise<ChatResponse> chat_async(std::shared_ptr<ChatModel> model, AsyncHttp& http,
                                     const std::vector<Msg>& messages, const ChatOptions& options = {});
// The same for model->stream(): on_chunk receives each piece on the loop thread, in order, before
// the promise resolves.
kj::Promise<ChatResponse> stream_async(std::shared_ptr<ChatModel> model, AsyncHttp& http,
                                       const std::vector<Msg>& messages, ChunkCallback on_chunk,
                                       const ChatOptions& options = {});

// What every HTTP model type shares: the config, its headers and retry policy, and POSTing JSON.
// Immutable after construction, so one instance serves any number of threads at once.
class HttpModel : public ChatModel {
 public:
  explicit HttpModel(ModelConfig config);

  const std::string& config_name() const override { return config_.config_name; }
  const std::string& model_type() const override { return config_.model_type; }

  // Throws Error(model_error) "model 'config_name': message" (api key redacted).
  [[noreturn]] void fail(std::string message, bool retryable = false) const;
  // Parses JSON from the endpoint, or fails naming it as garbage.
  Value parse_json(std::string_view text, std::string_view what) const;
  const ModelConfig& config() const { return config_; }

 protected:
  CallSite site() const { return CallSite{config_.config_name, config_.api_key}; }
  // Authentication headers; default "Authorization: Bearer <api_key>" when a key is set.
  virtual std::vector<std::string> auth_headers() const;
  // The request with the config's headers, auth_headers() and `extra_headers` added.
  HttpRequest make_http_request(std::string url, const Value& body, std::vector<std::string> extra_headers,
                                std::chrono::milliseconds timeout, bool stream) const;
  const RetryPolicy& retry_policy() const { return retry_; }

 private:
  ModelConfig config_;
  std::vector<std::string> headers_;  // config headers, "Name: value"
  RetryPolicy retry_;
};

// Base of the HTTP chat model types: builds a request, POSTs it with retries, parses the answer;
// blocking (http_client) or on a KJ loop (AsyncHttp), with the same request and parsing.
class HttpChatModel : public HttpModel, public AsyncChatModel {
 public:
  using HttpModel::HttpModel;

  // Streams internally when the config says `stream: true`.
  ChatResponse chat(const std::vector<Msg>& messages, const ChatOptions& options) override;
  ChatResponse stream(const std::vector<Msg>& messages, const std::function<void(std::string_view)>& on_chunk,
                      const ChatOptions& options) override;
  // At most config().max_concurrency of these run at once per AsyncHttp; the rest wait in FIFO order.
  // The coroutine forms agents call (agentd/model.h) stay visible beside the loop's forms.
  using ChatModel::chat_async;
  using ChatModel::stream_async;
  kj::Promise<ChatResponse> chat_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                       const ChatOptions& options) override;
  kj::Promise<ChatResponse> stream_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                         ChunkCallback on_chunk, const ChatOptions& options) override;

 protected:
  struct Request {
    std::string url;
    Value body;
    std::vector<std::string> headers;  // besides the config's headers and auth_headers()
  };

  // Incremental parser of one streamed answer; lives for one call on one thread.
  class StreamParser {
   public:
    virtual ~StreamParser() = default;
    virtual void feed(std::string_view bytes) = 0;
    // The whole answer once the body ended; throws (fail) if the stream was cut short.
    virtual ChatResponse finish() = 0;
  };

  virtual Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                                bool stream) const = 0;
  virtual ChatResponse parse_response(const Value& body) const = 0;
  virtual std::unique_ptr<StreamParser> make_stream_parser(
      const std::function<void(std::string_view)>& on_chunk) const = 0;
  // Whether this type can stream at all; stream() falls back to one chunk when not.
  virtual bool can_stream() const { return true; }

  // The config's generate_args with the call's merged over them ("stream" removed).
  Value merged_generate_args(const ChatOptions& options) const;
  // A finished answer: an assistant Msg carrying text, tool calls and metadata.
  ChatResponse make_response(std::string text, Value tool_calls, std::string finish_reason, Usage usage,
                             Value extra_metadata = Value::object()) const;

 private:
  ChatResponse run(const std::vector<Msg>& messages, const std::function<void(std::string_view)>* on_chunk,
                   const ChatOptions& options, bool stream);
  // The request run() and run_async() send.
  HttpRequest prepare(const std::vector<Msg>& messages, const ChatOptions& options, bool stream) const;
  kj::Promise<ChatResponse> run_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                      ChunkCallback on_chunk, const ChatOptions& options, bool stream);
};

// Base of the HTTP chat model types that read a streamed answer with their nested `Parser`
// (made from the model and the chunk callback): make_stream_parser() written once. A type
// declares `friend class StreamingChatModel<Type>;` so this may construct its Parser.
template <typename Model>
class StreamingChatModel : public HttpChatModel {
 public:
  using HttpChatModel::HttpChatModel;

 protected:
  std::unique_ptr<StreamParser> make_stream_parser(
      const std::function<void(std::string_view)>& on_chunk) const override {
    return std::make_unique<typename Model::Parser>(static_cast<const Model&>(*this), on_chunk);
  }
};

// Messages in OpenAI's Chat Completions form (also DashScope's and AgentScope's post API):
// {"role", "content"}; an assistant Msg with metadata["tool_calls"] carries them; a "tool" Msg
// carries metadata["tool_call_id"]. An empty role is sent as "user".
Value openai_messages(const std::vector<Msg>& messages);

// Accumulates streamed tool-call deltas (OpenAI's and DashScope's shape, by index).
class ToolCallAccumulator {
 public:
  void add(const Value& deltas);
  Value result() const;  // OpenAI's tool_calls array, or null when there were none

 private:
  Value calls_ = Value::array();
};

// A tool call's arguments as an object: OpenAI's carry them as a JSON string, which is parsed;
// anything that is not an object (or a string holding one) gives an empty object.
Value tool_call_arguments(const Value& args);

// Usage from {"prompt_tokens","completion_tokens","total_tokens"} or {"input_tokens","output_tokens",...}.
Usage usage_from_json(const Value& usage);

// Rough token count used by echo: whitespace-separated words.
std::int64_t count_words(std::string_view text);

}  // namespace agentd::detail
