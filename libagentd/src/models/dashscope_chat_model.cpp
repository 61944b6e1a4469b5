// dashscope_chat: DashScope's native text generation API,
// POST {base_url}/services/aigc/text-generation/generation with result_format "message";
// streams server-sent events (X-DashScope-SSE: enable, incremental output).
#include "chat_models.h"

namespace agentd::detail {
namespace {

class DashScopeChatModel final : public StreamingChatModel<DashScopeChatModel> {
 public:
  using StreamingChatModel::StreamingChatModel;

  friend class StreamingChatModel<DashScopeChatModel>;  // makes our Parser

 protected:
  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                        bool stream) const override {
    Request r;
    r.url = config().base_url + "/services/aigc/text-generation/generation";
    Value parameters = merged_generate_args(options);
    if (!parameters.contains("result_format")) parameters["result_format"] = "message";
    if (options.tools.is_array() && !options.tools.empty()) parameters["tools"] = options.tools;
    if (stream) {
      parameters["incremental_output"] = true;
      r.headers.push_back("X-DashScope-SSE: enable");
    }
    r.body = {{"model", config().model_name},
              {"input", {{"messages", openai_messages(messages)}}},
              {"parameters", std::move(parameters)}};
    return r;
  }

  // Fills text, tool calls and finish reason from one answer (whole, or one streamed increment).
  struct Piece {
    std::string text;
    Value tool_calls;
    std::string finish_reason;
  };

  Piece parse_output(const Value& body) const {
    if (!body.is_object())
      fail("unexpected answer from " + config().base_url + ": " + body.dump().substr(0, 200));
    if (body.contains("code") && body["code"].is_string() && !body["code"].get<std::string>().empty() &&
        !body.contains("output")) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
    auto output = body.find("output");
    if (output == body.end() || !output->is_object()) {
      fail("unexpected answer from " + config().base_url + " (no output): " + body.dump().substr(0, 200));
    }
    Piece p;
    auto finish = [](const Value& v) {
      std::string f = v.is_string() ? v.get<std::string>() : "";
      return f == "null" ? std::string() : f;
    };
    if (auto choices = output->find("choices");
        choices != output->end() && choices->is_array() && !choices->empty()) {
      const Value& choice = (*choices)[0];
      const Value message = choice.value("message", Value::object());
      const Value content = message.value("content", Value(""));
      p.text = content.is_string() ? content.get<std::string>() : content.is_null() ? "" : content.dump();
      p.tool_calls = message.value("tool_calls", Value());
      p.finish_reason = finish(choice.value("finish_reason", Value()));
    } else if (auto text = output->find("text"); text != output->end() && text->is_string()) {
      p.text = text->get<std::string>();  // result_format "text"
      p.finish_reason = finish(output->value("finish_reason", Value()));
    } else {
      fail("unexpected answer from " + config().base_url + " (no choices): " + body.dump().substr(0, 200));
    }
    return p;
  }

  ChatResponse parse_response(const Value& body) const override {
    Piece p = parse_output(body);
    Value extra = Value::object();
    if (body.contains("request_id")) extra["request_id"] = body["request_id"];
    return make_response(std::move(p.text), std::move(p.tool_calls), p.finish_reason,
                         usage_from_json(body.value("usage", Value())), std::move(extra));
  }

  class Parser final : public StreamParser {
   public:
    Parser(const DashScopeChatModel& model, const std::function<void(std::string_view)>& on_chunk)
        : model_(model),
          on_chunk_(on_chunk),
          sse_([this](std::string_view event, std::string_view data) { on_event(event, data); }) {}

    void feed(std::string_view bytes) override { sse_.feed(bytes); }

    ChatResponse finish() override {
      sse_.finish();
      if (finish_reason_.empty()) {
        model_.fail(
            "stream from " + model_.config().base_url + " ended before it was complete (no finish_reason)",
            true);
      }
      return model_.make_response(std::move(text_), tools_.result(), finish_reason_, usage_);
    }

   private:
    void on_event(std::string_view event, std::string_view data) {
      if (event == "error") {
        model_.fail("error in stream from " + model_.config().base_url + ": " + endpoint_error_message(data));
      }
      Value chunk = model_.parse_json(data, "a stream event");
      Piece p = model_.parse_output(chunk);
      if (!p.text.empty()) {
        text_ += p.text;
        on_chunk_(p.text);
      }
      if (p.tool_calls.is_array()) tools_.add(p.tool_calls);
      if (!p.finish_reason.empty()) finish_reason_ = p.finish_reason;
      if (chunk.contains("usage")) usage_ = usage_from_json(chunk["usage"]);
    }

    const DashScopeChatModel& model_;
    const std::function<void(std::string_view)>& on_chunk_;
    SseDecoder sse_;
    std::string text_;
    ToolCallAccumulator tools_;
    std::string finish_reason_;
    Usage usage_;
  };
};

}  // namespace

std::shared_ptr<ChatModel> make_dashscope_chat_model(const ModelConfig& config) {
  return std::make_shared<DashScopeChatModel>(config);
}

}  // namespace agentd::detail
