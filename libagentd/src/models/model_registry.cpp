#include "model_registry.h"

#include <agentd/error.h>

#include "chat_models.h"

#include <algorithm>
#include <type_traits>
#include <utility>

namespace agentd::detail {

ModelUsage& ModelUsage::operator+=(const ModelUsage& other) {
  calls += other.calls;
  errors += other.errors;
  prompt_tokens += other.prompt_tokens;
  completion_tokens += other.completion_tokens;
  latency_ms += other.latency_ms;
  if (latency_buckets.size() < other.latency_buckets.size())
    latency_buckets.resize(other.latency_buckets.size());
  for (std::size_t i = 0; i < other.latency_buckets.size(); ++i)
    latency_buckets[i] += other.latency_buckets[i];
  return *this;
}

UsageCounter::UsageCounter(bool with_histogram) {
  if (with_histogram)
    buckets_ = std::make_unique<std::array<std::atomic<std::uint64_t>, kLatencyBounds.size()>>();
}

struct UsageCounter::ToolLog {
  std::mutex mu;
  std::vector<ToolCallSpan> spans;
};

UsageCounter::~UsageCounter() { delete tool_calls_.load(); }

void UsageCounter::record_tool(const ToolCallSpan& span) {
  ToolLog* log = tool_calls_.load(std::memory_order_acquire);
  if (log == nullptr) {
    auto fresh = std::make_unique<ToolLog>();
    if (tool_calls_.compare_exchange_strong(log, fresh.get(), std::memory_order_acq_rel))
      log = fresh.release();
  }
  std::lock_guard lock(log->mu);
  // A call that makes thousands of tool calls keeps the first 1000 in its span.
  if (log->spans.size() < 1000) log->spans.push_back(span);
}

std::vector<ToolCallSpan> UsageCounter::take_tool_calls() {
  ToolLog* log = tool_calls_.load(std::memory_order_acquire);
  if (log == nullptr) return {};
  std::lock_guard lock(log->mu);
  return std::exchange(log->spans, {});
}

void UsageCounter::observe(std::chrono::milliseconds latency) {
  latency_ms_.fetch_add(latency.count(), std::memory_order_relaxed);
  if (!buckets_) return;
  const double seconds = static_cast<double>(latency.count()) / 1000;
  const auto it = std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), seconds);
  if (it != kLatencyBounds.end())
    (*buckets_)[static_cast<std::size_t>(it - kLatencyBounds.begin())].fetch_add(1,
                                                                                 std::memory_order_relaxed);
}

void UsageCounter::record(const ChatResponse& response) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  prompt_tokens_.fetch_add(response.usage.prompt_tokens, std::memory_order_relaxed);
  completion_tokens_.fetch_add(response.usage.completion_tokens, std::memory_order_relaxed);
  observe(response.latency);
}

void UsageCounter::record(const EmbeddingResponse& response) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  prompt_tokens_.fetch_add(response.usage.prompt_tokens, std::memory_order_relaxed);
  completion_tokens_.fetch_add(response.usage.completion_tokens, std::memory_order_relaxed);
  observe(response.latency);
}

void UsageCounter::record_error(std::chrono::milliseconds latency) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  errors_.fetch_add(1, std::memory_order_relaxed);
  observe(latency);
}

ModelUsage UsageCounter::snapshot() const {
  ModelUsage u;
  u.calls = calls_.load(std::memory_order_relaxed);
  u.errors = errors_.load(std::memory_order_relaxed);
  u.prompt_tokens = prompt_tokens_.load(std::memory_order_relaxed);
  u.completion_tokens = completion_tokens_.load(std::memory_order_relaxed);
  u.latency_ms = latency_ms_.load(std::memory_order_relaxed);
  if (buckets_)
    for (const auto& b : *buckets_) u.latency_buckets.push_back(b.load(std::memory_order_relaxed));
  return u;
}

namespace {

class CountingChatModel final : public ChatModel, public AsyncChatModel {
 public:
  CountingChatModel(std::shared_ptr<ChatModel> model, std::vector<std::shared_ptr<UsageCounter>> counters)
      : model_(std::move(model)), counters_(std::move(counters)) {}

  const std::string& config_name() const override { return model_->config_name(); }
  const std::string& model_type() const override { return model_->model_type(); }

  ChatResponse chat(const std::vector<Msg>& messages, const ChatOptions& options) override {
    return counted([&] { return model_->chat(messages, options); });
  }

  ChatResponse stream(const std::vector<Msg>& messages, const std::function<void(std::string_view)>& on_chunk,
                      const ChatOptions& options) override {
    return counted([&] { return model_->stream(messages, on_chunk, options); });
  }

  EmbeddingResponse embed(const std::vector<std::string>& texts, const EmbedOptions& options) override {
    return counted([&] { return model_->embed(texts, options); });
  }

  using ChatModel::chat_async;  // the coroutine forms (agentd/model.h) stay visible
  using ChatModel::stream_async;

  // Counted like the blocking calls; the wrapped model goes its own asynchronous way (or to the
  // worker pool). The wrapper outlives the promise (the caller's contract), the counters with it.
  kj::Promise<ChatResponse> chat_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                       const ChatOptions& options) override {
    return counted_async(detail::chat_async(model_, http, messages, options));
  }

  kj::Promise<ChatResponse> stream_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                         ChunkCallback on_chunk, const ChatOptions& options) override {
    return counted_async(detail::stream_async(model_, http, messages, std::move(on_chunk), options));
  }

 private:
  kj::Promise<ChatResponse> counted_async(kj::Promise<ChatResponse> call) {
    const auto started = std::chrono::steady_clock::now();
    return call
        .then(
            [this](ChatResponse r) {
              for (const auto& c : counters_) c->record(r);
              return r;
            },
            [this, started](kj::Exception&& e) -> ChatResponse {
              auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - started);
              for (const auto& c : counters_) c->record_error(latency);
              kj::throwFatalException(kj::mv(e));
            })
        .eagerlyEvaluate(nullptr);  // counted when the call ends, not when its result is taken
  }

  template <typename F>
  std::invoke_result_t<F> counted(F&& call) {
    const auto started = std::chrono::steady_clock::now();
    try {
      auto r = call();
      for (const auto& c : counters_) c->record(r);
      return r;
    } catch (...) {
      auto latency =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      for (const auto& c : counters_) c->record_error(latency);
      throw;
    }
  }

  std::shared_ptr<ChatModel> model_;
  std::vector<std::shared_ptr<UsageCounter>> counters_;
};

ModelConfig builtin_echo_config() {
  ModelConfig c;
  c.config_name = "echo";
  c.model_type = "echo";
  c.raw = {{"config_name", "echo"}, {"model_type", "echo"}};
  c.source = "built-in";
  return c;
}

}  // namespace

std::shared_ptr<ChatModel> with_usage_counters(std::shared_ptr<ChatModel> model,
                                               std::vector<std::shared_ptr<UsageCounter>> counters) {
  return std::make_shared<CountingChatModel>(std::move(model), std::move(counters));
}

std::shared_ptr<ChatModel> make_chat_model(const ModelConfig& config) {
  const std::string& type = config.model_type;
  if (type == "echo") return make_echo_model(config);
  if (type == "openai_chat") return make_openai_chat_model(config);
  if (type == "ollama_chat") return make_ollama_chat_model(config);
  if (type == "dashscope_chat") return make_dashscope_chat_model(config);
  if (type == "post_api_chat") return make_post_api_chat_model(config);
  if (type == "anthropic_chat") return make_anthropic_chat_model(config);
  if (type == "gemini_chat") return make_gemini_chat_model(config);
  if (type == "ollama_generate") return make_ollama_generate_model(config);
  // The OpenAI chat protocol; model_config set each provider's base URL.
  if (type == "zhipuai_chat" || type == "yi_chat" || type == "litellm_chat")
    return make_openai_chat_model(config);
  if (type == "openai_embedding" || type == "zhipuai_embedding" || type == "ollama_embedding" ||
      type == "dashscope_text_embedding" || type == "gemini_embedding") {
    return make_embedding_model(config);
  }
  throw Error(ErrorCode::config_error,
              "model config '" + config.config_name + "': " + unsupported_model_type_message(type));
}

ModelRegistry::ModelRegistry() { replace({}); }

std::uint64_t ModelRegistry::replace(std::vector<ModelConfig> configs) {
  bool has_echo = std::any_of(configs.begin(), configs.end(),
                              [](const ModelConfig& c) { return c.config_name == "echo"; });
  if (!has_echo) configs.push_back(builtin_echo_config());

  std::lock_guard lock(mutex_);
  const std::uint64_t next_version = version_ + 1;
  auto next = std::make_shared<Snapshot>();
  std::map<std::string, std::shared_ptr<UsageCounter>> new_counters;  // kept only if all succeeds
  for (auto& config : configs) {
    if (next->count(config.config_name) != 0) {
      throw Error(ErrorCode::config_error, "duplicate config_name '" + config.config_name + "'" +
                                               (config.source.empty() ? "" : " (at " + config.source + ")"));
    }
    Entry entry;
    if (snapshot_) {
      auto old = snapshot_->find(config.config_name);
      if (old != snapshot_->end() && old->second.config.model_type == config.model_type &&
          old->second.config.raw == config.raw) {
        entry = old->second;  // unchanged: keep the model and its version
      }
    }
    if (!entry.model) {
      std::shared_ptr<UsageCounter> counter;
      if (auto it = counters_.find(config.config_name); it != counters_.end()) {
        counter = it->second;
      } else {
        counter = new_counters[config.config_name] = std::make_shared<UsageCounter>(/*with_histogram=*/true);
      }
      entry.model = with_usage_counters(make_chat_model(config), {counter});
      entry.version = next_version;
    }
    entry.config = std::move(config);
    std::string name = entry.config.config_name;
    next->emplace(std::move(name), std::move(entry));
  }
  counters_.merge(new_counters);
  snapshot_ = std::move(next);
  version_ = next_version;
  return next_version;
}

std::shared_ptr<ChatModel> ModelRegistry::get(std::string_view config_name) const {
  std::shared_ptr<const Snapshot> snapshot;
  {
    std::lock_guard lock(mutex_);
    snapshot = snapshot_;
  }
  auto it = snapshot->find(config_name);
  if (it != snapshot->end()) return it->second.model;
  std::string known;
  for (const auto& [name, entry] : *snapshot) known += (known.empty() ? "" : ", ") + name;
  throw Error(ErrorCode::config_error,
              "no model config named '" + std::string(config_name) + "'; known model configs: " + known);
}

std::vector<std::string> ModelRegistry::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [name, entry] : *snapshot_) out.push_back(name);
  return out;
}

std::uint64_t ModelRegistry::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

std::vector<ModelInfo> ModelRegistry::list() const {
  std::lock_guard lock(mutex_);
  std::vector<ModelInfo> out;
  for (const auto& [name, entry] : *snapshot_) {
    ModelInfo info;
    info.config_name = name;
    info.model_type = entry.config.model_type;
    info.model_name = entry.config.model_name;
    info.version = entry.version;
    if (auto c = counters_.find(name); c != counters_.end()) info.usage = c->second->snapshot();
    out.push_back(std::move(info));
  }
  return out;
}

ModelUsage ModelRegistry::total_usage() const {
  std::lock_guard lock(mutex_);
  ModelUsage total;
  for (const auto& [name, counter] : counters_) total += counter->snapshot();
  return total;
}

}  // namespace agentd::detail
