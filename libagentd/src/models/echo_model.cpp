// echo: the built-in model that needs no network. It answers with the text of the last user
// message (the last message when none is from a user) and counts words as tokens.
#include "chat_models.h"

#include "async_loop.h"

#include <chrono>
#include <optional>
#include <thread>

namespace agentd::detail {
namespace {

class EchoModel final : public ChatModel, public AsyncChatModel {
 public:
  explicit EchoModel(const ModelConfig& config)
      : config_name_(config.config_name),
        model_type_(config.model_type),
        model_name_(config.model_name),
        delay_(config.extra.value("delay_ms", std::int64_t{0})) {}

  const std::string& config_name() const override { return config_name_; }
  const std::string& model_type() const override { return model_type_; }

  // The echo model answers the same whatever the options (it has no sampling to tune).
  ChatResponse chat(const std::vector<Msg>& messages, const ChatOptions& /*options*/) override {
    return answer(messages, nullptr);
  }

  ChatResponse stream(const std::vector<Msg>& messages, const std::function<void(std::string_view)>& on_chunk,
                      const ChatOptions& /*options*/) override {
    return answer(messages, on_chunk ? &on_chunk : nullptr);
  }

  using ChatModel::chat_async;  // the coroutine forms (agentd/model.h) stay visible
  using ChatModel::stream_async;

  // On the loop, without a thread: in the next turn, or after delay_ms on the loop's timer.
  kj::Promise<ChatResponse> chat_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                       const ChatOptions& options) override {
    return stream_async(http, messages, {}, options);
  }

  // Chunks reach on_chunk in a later turn of the loop, never before this returns.
  kj::Promise<ChatResponse> stream_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                         ChunkCallback on_chunk, const ChatOptions& /*options*/) override {
    const auto started = std::chrono::steady_clock::now();
    kj::Promise<void> wait =
        delay_.count() == 0 ? kj::evalLater([] {}) : steady_deadline(http.timer(), started + delay_);
    return wait
        .then([this, messages, started, on_chunk = std::move(on_chunk)] {
          return rethrow_as_kj([&] { return answer(messages, on_chunk ? &on_chunk : nullptr, started); });
        })
        .eagerlyEvaluate(nullptr);  // answers (and streams) when due, not when the result is taken
  }

 private:
  // started: when the call began (its delay already waited); otherwise now, and the delay is slept.
  ChatResponse answer(const std::vector<Msg>& messages, const std::function<void(std::string_view)>* on_chunk,
                      std::optional<std::chrono::steady_clock::time_point> started_at = std::nullopt) const {
    const auto started = started_at.value_or(std::chrono::steady_clock::now());
    if (!started_at && delay_.count() > 0) std::this_thread::sleep_for(delay_);
    const Msg* source = nullptr;
    for (auto it = messages.rbegin(); it != messages.rend() && source == nullptr; ++it) {
      if (it->role == "user") source = &*it;
    }
    if (source == nullptr && !messages.empty()) source = &messages.back();
    std::string text = source != nullptr ? source->text() : std::string();

    if (on_chunk != nullptr) {  // one chunk per word, keeping the spacing
      std::size_t start = 0;
      while (start < text.size()) {
        std::size_t space = text.find_first_of(" \t\n", text.find_first_not_of(" \t\n", start));
        std::size_t end = space == std::string::npos ? text.size() : text.find_first_not_of(" \t\n", space);
        if (end == std::string::npos) end = text.size();
        (*on_chunk)(std::string_view(text).substr(start, end - start));
        start = end;
      }
    }

    ChatResponse r;
    for (const Msg& m : messages) r.usage.prompt_tokens += count_words(m.text());
    r.usage.completion_tokens = count_words(text);
    r.usage.total_tokens = r.usage.prompt_tokens + r.usage.completion_tokens;
    r.msg = Msg("assistant", Value(text), "assistant");
    r.msg.metadata = {{"config_name", config_name_},
                      {"model_type", model_type_},
                      {"finish_reason", "stop"},
                      {"usage",
                       {{"prompt_tokens", r.usage.prompt_tokens},
                        {"completion_tokens", r.usage.completion_tokens},
                        {"total_tokens", r.usage.total_tokens}}}};
    if (!model_name_.empty()) r.msg.metadata["model_name"] = model_name_;
    r.latency =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    return r;
  }

  std::string config_name_;
  std::string model_type_;
  std::string model_name_;
  std::chrono::milliseconds delay_;
};

}  // namespace

std::shared_ptr<ChatModel> make_echo_model(const ModelConfig& config) {
  return std::make_shared<EchoModel>(config);
}

}  // namespace agentd::detail
