// gemini_chat: Google's Gemini API, POST {base_url}/models/{model}:generateContent, or
// :streamGenerateContent?alt=sse when streaming (x-goog-api-key). Roles user/model, system
// messages as systemInstruction, OpenAI-style tools as functionDeclarations, function calls back
// in OpenAI's shape, usage from usageMetadata.
#include "chat_models.h"

#include <agentd/value_limits.h>

#include <map>
#include <optional>

namespace agentd::detail {
namespace {

// Request fields that stay top-level; every other generate_args key goes into generationConfig.
bool is_gemini_request_key(const std::string& key) {
  return key == "safetySettings" || key == "toolConfig" || key == "cachedContent" || key == "labels";
}

Value gemini_tools(const Value& tools) {
  Value decls = Value::array();
  for (const Value& t : tools) {
    const Value fn = t.value("function", t);
    Value d = {{"name", fn.value("name", "")}, {"description", fn.value("description", "")}};
    if (fn.contains("parameters")) d["parameters"] = fn["parameters"];
    decls.push_back(std::move(d));
  }
  return Value::array({{{"functionDeclarations", std::move(decls)}}});
}

class GeminiChatModel final : public StreamingChatModel<GeminiChatModel> {
 public:
  using StreamingChatModel::StreamingChatModel;

  // "gemini-pro" and AgentScope's "models/gemini-pro" name the same model.
  std::string model_path() const {
    const std::string& name = config().model_name;
    return name.rfind("models/", 0) == 0 ? name : "models/" + name;
  }

  friend class StreamingChatModel<GeminiChatModel>;  // makes our Parser

 protected:
  std::vector<std::string> auth_headers() const override {
    if (config().api_key.empty()) return {};
    return {"x-goog-api-key: " + config().api_key};
  }

  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                        bool stream) const override {
    Request r;
    r.url = config().base_url + "/" + model_path() +
            (stream ? ":streamGenerateContent?alt=sse" : ":generateContent");
    Value body = Value::object();
    std::string system;
    Value contents = Value::array();
    std::map<std::string, std::string> call_names;  // tool call id -> function name (for results)
    for (const Value& m : openai_messages(messages)) {
      const std::string role = m.value("role", "user");
      const std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
      if (role == "system") {
        system += (system.empty() ? "" : "\n") + text;
        continue;
      }
      Value parts = Value::array();
      if (role == "tool") {
        const std::string id = m.value("tool_call_id", "");
        parts.push_back({{"functionResponse",
                          {{"name", call_names.count(id) != 0 ? call_names[id] : id},
                           {"response", {{"content", text}}}}}});
        // The responses to one turn's function calls go back together, in one user turn.
        if (!contents.empty() && contents.back()["role"] == "user" &&
            contents.back()["parts"].back().contains("functionResponse")) {
          contents.back()["parts"].push_back(std::move(parts[0]));
        } else {
          contents.push_back({{"role", "user"}, {"parts", std::move(parts)}});
        }
        continue;
      }
      if (!text.empty()) parts.push_back({{"text", text}});
      if (auto calls = m.find("tool_calls"); calls != m.end()) {
        for (const Value& call : *calls) {
          const Value fn = call.value("function", Value::object());
          call_names[call.value("id", "")] = fn.value("name", "");
          parts.push_back({{"functionCall",
                            {{"name", fn.value("name", "")},
                             {"args", tool_call_arguments(fn.value("arguments", Value()))}}}});
        }
      }
      if (parts.empty()) parts.push_back({{"text", ""}});
      contents.push_back({{"role", role == "assistant" ? "model" : "user"}, {"parts", std::move(parts)}});
    }
    body["contents"] = std::move(contents);
    if (!system.empty()) body["systemInstruction"] = {{"parts", Value::array({{{"text", system}}})}};
    Value generation = Value::object();
    const Value args = merged_generate_args(options);
    for (const auto& [k, v] : args.items()) {
      if (is_gemini_request_key(k)) {
        body[k] = v;
      } else if ((k == "generationConfig" || k == "generation_config") && v.is_object()) {
        for (const auto& [gk, gv] : v.items()) generation[gk] = gv;
      } else {
        generation[k] = v;
      }
    }
    if (!generation.empty()) body["generationConfig"] = std::move(generation);
    if (options.tools.is_array() && !options.tools.empty()) body["tools"] = gemini_tools(options.tools);
    r.body = std::move(body);
    return r;
  }

 public:
  // One answer or one streamed piece: text, function calls, finish reason, usage.
  struct Piece {
    std::string text;
    Value calls = Value::array();
    std::string finish_reason;
    std::optional<Usage> usage;
  };

  Piece parse_piece(const Value& body) const {
    if (!body.is_object())
      fail("unexpected answer from " + config().base_url + ": " + body.dump().substr(0, 200));
    if (auto e = body.find("error"); e != body.end() && !e->is_null()) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
    Piece p;
    if (auto u = body.find("usageMetadata"); u != body.end() && u->is_object()) {
      Usage usage;
      usage.prompt_tokens = u->value("promptTokenCount", std::int64_t{0});
      usage.completion_tokens = u->value("candidatesTokenCount", std::int64_t{0});
      usage.total_tokens = u->value("totalTokenCount", std::int64_t{0});
      p.usage = usage;
    }
    auto candidates = body.find("candidates");
    if (candidates == body.end() || !candidates->is_array() || candidates->empty()) {
      if (auto feedback = body.find("promptFeedback");
          feedback != body.end() && feedback->contains("blockReason")) {
        fail("the prompt was blocked by " + config().base_url + ": " + (*feedback)["blockReason"].dump());
      }
      if (p.usage) return p;  // a usage-only stream event
      fail("unexpected answer from " + config().base_url + " (no candidates): " + body.dump().substr(0, 200));
    }
    const Value& candidate = (*candidates)[0];
    if (auto f = candidate.find("finishReason"); f != candidate.end() && f->is_string()) p.finish_reason = *f;
    const Value parts = candidate.value("content", Value::object()).value("parts", Value::array());
    for (const Value& part : parts) {
      if (!part.is_object()) continue;
      if (auto t = part.find("text"); t != part.end() && t->is_string() && !part.value("thought", false)) {
        p.text += t->get<std::string>();
      }
      if (auto fc = part.find("functionCall"); fc != part.end() && fc->is_object()) {
        p.calls.push_back(
            {{"type", "function"},
             {"function",
              {{"name", fc->value("name", "")}, {"arguments", fc->value("args", Value::object()).dump()}}}});
      }
    }
    return p;
  }

  static void number_calls(Value& calls, std::size_t first) {
    for (std::size_t i = 0; i < calls.size(); ++i) calls[i]["id"] = "call_" + std::to_string(first + i);
  }

 protected:
  ChatResponse parse_response(const Value& body) const override {
    Piece p = parse_piece(body);
    number_calls(p.calls, 0);
    return make_response(std::move(p.text), std::move(p.calls), p.finish_reason, p.usage.value_or(Usage{}));
  }

  class Parser final : public StreamParser {
   public:
    Parser(const GeminiChatModel& model, const std::function<void(std::string_view)>& on_chunk)
        : model_(model),
          on_chunk_(on_chunk),
          sse_([this](std::string_view, std::string_view data) { on_event(data); }) {}

    void feed(std::string_view bytes) override {
      if (events_ == 0 && head_.size() < 4096) head_.append(bytes.substr(0, 4096 - head_.size()));
      sse_.feed(bytes);
    }

    ChatResponse finish() override {
      sse_.finish();
      if (events_ == 0) {
        model_.fail("stream from " + model_.config().base_url +
                    " had no events: " + endpoint_error_message(head_));
      }
      if (finish_reason_.empty()) {
        model_.fail(
            "stream from " + model_.config().base_url + " ended before it was complete (no finishReason)",
            true);
      }
      return model_.make_response(std::move(text_), std::move(calls_), finish_reason_, usage_);
    }

   private:
    void on_event(std::string_view data) {
      ++events_;
      Piece p = model_.parse_piece(model_.parse_json(data, "a stream event"));
      if (!p.text.empty()) {
        text_ += p.text;
        on_chunk_(p.text);
      }
      number_calls(p.calls, calls_.size());
      for (auto& c : p.calls) calls_.push_back(std::move(c));
      if (!p.finish_reason.empty()) finish_reason_ = p.finish_reason;
      if (p.usage) usage_ = *p.usage;
    }

    const GeminiChatModel& model_;
    const std::function<void(std::string_view)>& on_chunk_;
    SseDecoder sse_;
    std::string head_;
    std::size_t events_ = 0;
    std::string text_;
    Value calls_ = Value::array();
    std::string finish_reason_;
    Usage usage_;
  };
};

}  // namespace

std::shared_ptr<ChatModel> make_gemini_chat_model(const ModelConfig& config) {
  return std::make_shared<GeminiChatModel>(config);
}

}  // namespace agentd::detail
