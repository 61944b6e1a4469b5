// ollama_chat: Ollama's native API, POST {host}/api/chat; streams newline-delimited JSON.
#include "chat_models.h"

#include <agentd/value_limits.h>

namespace agentd::detail {
namespace {

// Keys of generate_args that are request fields in Ollama's API; all others are model options.
bool is_ollama_chat_request_key(const std::string& key) {
  return key == "format" || key == "keep_alive" || key == "think" || key == "tools";
}

// Ollama's tool calls carry arguments as an object, OpenAI's as a JSON string; agents see OpenAI's.
Value tool_calls_to_openai(const Value& calls) {
  if (!calls.is_array() || calls.empty()) return Value();
  Value out = Value::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Value& call = calls[i];
    Value fn = call.value("function", Value::object());
    const Value args = fn.value("arguments", Value::object());
    out.push_back({{"id", call.value("id", "call_" + std::to_string(i))},
                   {"type", "function"},
                   {"function",
                    {{"name", fn.value("name", "")},
                     {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
  }
  return out;
}

Value tool_calls_to_ollama(const Value& calls) {
  Value out = Value::array();
  for (const Value& call : calls) {
    Value fn = call.value("function", Value::object());
    Value args = fn.value("arguments", Value::object());
    if (args.is_string()) {
      Value parsed = parse_value(args.get<std::string>()).value;
      args = parsed.is_discarded() ? Value::object() : parsed;
    }
    out.push_back({{"function", {{"name", fn.value("name", "")}, {"arguments", args}}}});
  }
  return out;
}

class OllamaChatModel final : public StreamingChatModel<OllamaChatModel> {
 public:
  using StreamingChatModel::StreamingChatModel;

  friend class StreamingChatModel<OllamaChatModel>;  // makes our Parser

 protected:
  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                        bool stream) const override {
    Request r;
    r.url = config().base_url + "/api/chat";
    Value body = Value::object();
    body["model"] = config().model_name;
    Value msgs = openai_messages(messages);
    for (Value& m : msgs) {
      if (auto calls = m.find("tool_calls"); calls != m.end()) *calls = tool_calls_to_ollama(*calls);
      if (m["content"].is_null()) m["content"] = "";
      m.erase("tool_call_id");
    }
    body["messages"] = std::move(msgs);
    body["stream"] = stream;
    Value model_options = config().extra.value("options", Value::object());
    const Value args = merged_generate_args(options);
    for (const auto& [k, v] : args.items()) {
      if (is_ollama_chat_request_key(k)) {
        body[k] = v;
      } else if (k == "options" && v.is_object()) {
        for (auto& [ok, ov] : v.items()) model_options[ok] = ov;
      } else {
        model_options[k] = v;
      }
    }
    if (!model_options.empty()) body["options"] = std::move(model_options);
    if (config().extra.contains("keep_alive") && !body.contains("keep_alive")) {
      body["keep_alive"] = config().extra["keep_alive"];
    }
    if (options.tools.is_array() && !options.tools.empty()) body["tools"] = options.tools;
    r.body = std::move(body);
    return r;
  }

  ChatResponse parse_response(const Value& body) const override {
    if (!body.is_object())
      fail("unexpected answer from " + config().base_url + ": " + body.dump().substr(0, 200));
    if (auto e = body.find("error"); e != body.end() && !e->is_null()) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
    auto message = body.find("message");
    if (message == body.end() || !message->is_object()) {
      fail("unexpected answer from " + config().base_url + " (no message): " + body.dump().substr(0, 200));
    }
    Usage usage;
    usage.prompt_tokens = body.value("prompt_eval_count", std::int64_t{0});
    usage.completion_tokens = body.value("eval_count", std::int64_t{0});
    const Value content = message->value("content", Value(""));
    return make_response(content.is_string() ? content.get<std::string>() : content.dump(),
                         tool_calls_to_openai(message->value("tool_calls", Value())),
                         body.value("done_reason", ""), usage);
  }

  class Parser final : public StreamParser {
   public:
    Parser(const OllamaChatModel& model, const std::function<void(std::string_view)>& on_chunk)
        : model_(model), on_chunk_(on_chunk) {}

    void feed(std::string_view bytes) override {
      lines_.feed(bytes, [this](std::string_view line) { on_line(line); });
    }

    ChatResponse finish() override {
      lines_.finish([this](std::string_view line) { on_line(line); });
      if (!done_) {
        model_.fail(
            "stream from " + model_.config().base_url + " ended before it was complete (no \"done\": true)",
            true);
      }
      return model_.make_response(std::move(text_), std::move(tool_calls_), finish_reason_, usage_);
    }

   private:
    void on_line(std::string_view line) {
      if (line.find_first_not_of(" \t") == std::string_view::npos) return;
      Value chunk = model_.parse_json(line, "a stream line");
      if (!chunk.is_object()) model_.fail("unexpected stream line: " + std::string(line.substr(0, 200)));
      if (auto e = chunk.find("error"); e != chunk.end() && !e->is_null()) {
        model_.fail("error in stream from " + model_.config().base_url + ": " + endpoint_error_message(line));
      }
      if (auto m = chunk.find("message"); m != chunk.end() && m->is_object()) {
        if (auto c = m->find("content");
            c != m->end() && c->is_string() && !c->get_ref<const std::string&>().empty()) {
          text_ += c->get<std::string>();
          on_chunk_(c->get_ref<const std::string&>());
        }
        Value calls = tool_calls_to_openai(m->value("tool_calls", Value()));
        if (calls.is_array()) {
          if (!tool_calls_.is_array()) tool_calls_ = Value::array();
          for (auto& c : calls) {
            c["id"] = "call_" + std::to_string(tool_calls_.size());
            tool_calls_.push_back(std::move(c));
          }
        }
      }
      if (chunk.value("done", false)) {
        done_ = true;
        finish_reason_ = chunk.value("done_reason", "stop");
        usage_.prompt_tokens = chunk.value("prompt_eval_count", std::int64_t{0});
        usage_.completion_tokens = chunk.value("eval_count", std::int64_t{0});
      }
    }

    const OllamaChatModel& model_;
    const std::function<void(std::string_view)>& on_chunk_;
    LineSplitter lines_;
    bool done_ = false;
    std::string text_;
    Value tool_calls_;
    std::string finish_reason_;
    Usage usage_;
  };
};

}  // namespace

std::shared_ptr<ChatModel> make_ollama_chat_model(const ModelConfig& config) {
  return std::make_shared<OllamaChatModel>(config);
}

}  // namespace agentd::detail
