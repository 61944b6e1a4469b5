// anthropic_chat: Anthropic's Messages API, POST {base_url}/v1/messages (x-api-key,
// anthropic-version 2023-06-01). System messages become the top-level `system`; tools and tool
// calls are mapped to and from OpenAI's shape; streaming reads Anthropic's server-sent events.
#include "chat_models.h"

#include <agentd/value_limits.h>

namespace agentd::detail {
namespace {

constexpr std::int64_t kDefaultMaxTokens = 4096;  // the API requires max_tokens; AgentScope's default

// OpenAI-style tools [{"type":"function","function":{name,description,parameters}}] -> Anthropic's.
Value anthropic_tools(const Value& tools) {
  Value out = Value::array();
  for (const Value& t : tools) {
    const Value fn = t.value("function", t);
    out.push_back({{"name", fn.value("name", "")},
                   {"description", fn.value("description", "")},
                   {"input_schema",
                    fn.value("parameters", Value{{"type", "object"}, {"properties", Value::object()}})}});
  }
  return out;
}

// Messages: the system ones joined into `system`; tool calls as tool_use blocks; tool results as a
// user message with a tool_result block.
void anthropic_messages(const std::vector<Msg>& messages, Value& body) {
  std::string system;
  Value out = Value::array();
  for (const Value& m : openai_messages(messages)) {
    const std::string role = m.value("role", "user");
    const std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
    if (role == "system") {
      system += (system.empty() ? "" : "\n") + text;
      continue;
    }
    if (role == "tool") {
      Value result = {
          {"type", "tool_result"}, {"tool_use_id", m.value("tool_call_id", "")}, {"content", text}};
      // The results of one turn's tool calls go back together, in one user message.
      if (!out.empty() && out.back()["role"] == "user" && out.back()["content"].is_array() &&
          !out.back()["content"].empty() && out.back()["content"].back().value("type", "") == "tool_result") {
        out.back()["content"].push_back(std::move(result));
      } else {
        out.push_back({{"role", "user"}, {"content", Value::array({std::move(result)})}});
      }
      continue;
    }
    if (auto calls = m.find("tool_calls"); calls != m.end()) {
      Value blocks = Value::array();
      if (!text.empty()) blocks.push_back({{"type", "text"}, {"text", text}});
      for (const Value& call : *calls) {
        const Value fn = call.value("function", Value::object());
        blocks.push_back({{"type", "tool_use"},
                          {"id", call.value("id", "")},
                          {"name", fn.value("name", "")},
                          {"input", tool_call_arguments(fn.value("arguments", Value()))}});
      }
      out.push_back({{"role", "assistant"}, {"content", std::move(blocks)}});
      continue;
    }
    out.push_back({{"role", role == "assistant" ? "assistant" : "user"},
                   {"content", m["content"].is_array() ? m["content"] : Value(text)}});
  }
  if (!system.empty()) body["system"] = system;
  body["messages"] = std::move(out);
}

class AnthropicChatModel final : public StreamingChatModel<AnthropicChatModel> {
 public:
  using StreamingChatModel::StreamingChatModel;

  friend class StreamingChatModel<AnthropicChatModel>;  // makes our Parser

 protected:
  std::vector<std::string> auth_headers() const override {
    std::vector<std::string> h = {"anthropic-version: 2023-06-01"};
    if (!config().api_key.empty()) h.push_back("x-api-key: " + config().api_key);
    return h;
  }

  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                        bool stream) const override {
    Request r;
    r.url = config().base_url + "/v1/messages";
    Value body = Value::object();
    body["model"] = config().model_name;
    body["max_tokens"] = kDefaultMaxTokens;
    const Value args = merged_generate_args(options);
    for (const auto& [k, v] : args.items()) body[k] = v;
    anthropic_messages(messages, body);
    if (options.tools.is_array() && !options.tools.empty()) body["tools"] = anthropic_tools(options.tools);
    if (stream) body["stream"] = true;
    r.body = std::move(body);
    return r;
  }

  void check_error(const Value& body, std::string_view where) const {
    if (!body.is_object()) fail("unexpected " + std::string(where) + " from " + config().base_url);
    if (body.value("type", "") == "error" || (body.contains("error") && !body["error"].is_null())) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
  }

  ChatResponse parse_response(const Value& body) const override {
    check_error(body, "answer");
    auto content = body.find("content");
    if (content == body.end() || !content->is_array()) {
      fail("unexpected answer from " + config().base_url + " (no content): " + body.dump().substr(0, 200));
    }
    std::string text;
    Value calls = Value::array();
    for (const Value& block : *content) {
      if (!block.is_object()) continue;
      const std::string type = block.value("type", "");
      if (type == "text") {
        text += block.value("text", "");
      } else if (type == "tool_use") {
        calls.push_back({{"id", block.value("id", "")},
                         {"type", "function"},
                         {"function",
                          {{"name", block.value("name", "")},
                           {"arguments", block.value("input", Value::object()).dump()}}}});
      }
    }
    const Value stop = body.value("stop_reason", Value());
    return make_response(std::move(text), std::move(calls), stop.is_string() ? stop.get<std::string>() : "",
                         usage_from_json(body.value("usage", Value())));
  }

  // Events: message_start (input tokens), content_block_start (text or tool_use with id and name),
  // content_block_delta (text_delta or input_json_delta), message_delta (stop_reason, output
  // tokens), message_stop; ping is ignored; error fails the call.
  class Parser final : public StreamParser {
   public:
    Parser(const AnthropicChatModel& model, const std::function<void(std::string_view)>& on_chunk)
        : model_(model),
          on_chunk_(on_chunk),
          sse_([this](std::string_view, std::string_view data) { on_event(data); }) {}

    void feed(std::string_view bytes) override { sse_.feed(bytes); }

    ChatResponse finish() override {
      sse_.finish();
      if (!stopped_) {
        model_.fail(
            "stream from " + model_.config().base_url + " ended before it was complete (no message_stop)",
            true);
      }
      Value calls = Value::array();
      for (auto& [index, call] : blocks_) {
        if (call.is_null()) continue;
        std::string args = call["function"]["arguments"].get<std::string>();
        if (args.empty()) call["function"]["arguments"] = "{}";
        calls.push_back(call);
      }
      return model_.make_response(std::move(text_), std::move(calls), stop_reason_, usage_);
    }

   private:
    void on_event(std::string_view data) {
      Value e = model_.parse_json(data, "a stream event");
      model_.check_error(e, "stream event");
      const std::string type = e.value("type", "");
      if (type == "message_start") {
        usage_.prompt_tokens =
            usage_from_json(e.value("message", Value::object()).value("usage", Value())).prompt_tokens;
      } else if (type == "content_block_start") {
        const Value block = e.value("content_block", Value::object());
        Value call;
        if (block.value("type", "") == "tool_use") {
          call = {{"id", block.value("id", "")},
                  {"type", "function"},
                  {"function", {{"name", block.value("name", "")}, {"arguments", ""}}}};
        }
        blocks_.emplace_back(e.value("index", 0), std::move(call));
      } else if (type == "content_block_delta") {
        const Value delta = e.value("delta", Value::object());
        const std::string kind = delta.value("type", "");
        if (kind == "text_delta") {
          std::string piece = delta.value("text", "");
          if (!piece.empty()) {
            text_ += piece;
            on_chunk_(piece);
          }
        } else if (kind == "input_json_delta") {
          const int index = e.value("index", 0);
          for (auto& [i, call] : blocks_) {
            if (i != index || call.is_null()) continue;
            call["function"]["arguments"] =
                call["function"]["arguments"].get<std::string>() + delta.value("partial_json", "");
          }
        }
      } else if (type == "message_delta") {
        const Value delta = e.value("delta", Value::object());
        if (delta.contains("stop_reason") && delta["stop_reason"].is_string())
          stop_reason_ = delta["stop_reason"];
        if (auto u = e.find("usage"); u != e.end()) {
          usage_.completion_tokens = usage_from_json(*u).completion_tokens;
        }
      } else if (type == "message_stop") {
        stopped_ = true;
      }
    }

    const AnthropicChatModel& model_;
    const std::function<void(std::string_view)>& on_chunk_;
    SseDecoder sse_;
    std::vector<std::pair<int, Value>> blocks_;  // content block index -> tool call (null for text)
    std::string text_;
    std::string stop_reason_;
    Usage usage_;
    bool stopped_ = false;
  };
};

}  // namespace

std::shared_ptr<ChatModel> make_anthropic_chat_model(const ModelConfig& config) {
  return std::make_shared<AnthropicChatModel>(config);
}

}  // namespace agentd::detail
