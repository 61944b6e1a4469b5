// openai_chat: any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, DeepSeek,
// DashScope's compatible mode, Ollama's /v1): POST {base_url}/chat/completions.
#include "chat_models.h"

namespace agentd::detail {
namespace {

std::string content_text(const Value& content) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (content.is_array()) {  // content parts: concatenate the text ones
    std::string out;
    for (const auto& part : content) {
      if (part.is_object() && part.value("type", "") == "text") out += part.value("text", "");
    }
    return out;
  }
  return content.dump();
}

class OpenAIChatModel final : public StreamingChatModel<OpenAIChatModel> {
 public:
  using StreamingChatModel::StreamingChatModel;

  friend class StreamingChatModel<OpenAIChatModel>;  // makes our Parser

 protected:
  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                        bool stream) const override {
    Request r;
    r.url = config().base_url + "/chat/completions";
    Value body = Value::object();
    body["model"] = config().model_name;
    const Value args = merged_generate_args(options);
    for (const auto& [k, v] : args.items()) body[k] = v;
    body["messages"] = openai_messages(messages);
    if (options.tools.is_array() && !options.tools.empty()) body["tools"] = options.tools;
    if (stream) {
      body["stream"] = true;
      // Ask for the usage chunk unless generate_args chose otherwise (null drops the field).
      if (!body.contains("stream_options")) {
        body["stream_options"] = {{"include_usage", true}};
      } else if (body["stream_options"].is_null()) {
        body.erase("stream_options");
      }
    } else {
      body.erase("stream_options");
    }
    r.body = std::move(body);
    return r;
  }

  ChatResponse parse_response(const Value& body) const override {
    if (!body.is_object())
      fail("unexpected answer from " + config().base_url + ": " + body.dump().substr(0, 200));
    if (auto e = body.find("error"); e != body.end() && !e->is_null()) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
    auto choices = body.find("choices");
    if (choices == body.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) {
      fail("unexpected answer from " + config().base_url + " (no choices): " + body.dump().substr(0, 200));
    }
    const Value& choice = (*choices)[0];
    const Value message = choice.value("message", Value::object());
    Value extra = Value::object();
    if (auto rc = message.find("reasoning_content"); rc != message.end() && rc->is_string()) {
      extra["reasoning_content"] = *rc;
    }
    Value tool_calls = message.value("tool_calls", Value());
    std::string finish = choice.contains("finish_reason") && choice["finish_reason"].is_string()
                             ? choice["finish_reason"].get<std::string>()
                             : "";
    return make_response(content_text(message.value("content", Value())), std::move(tool_calls), finish,
                         usage_from_json(body.value("usage", Value())), std::move(extra));
  }

  class Parser final : public StreamParser {
   public:
    Parser(const OpenAIChatModel& model, const std::function<void(std::string_view)>& on_chunk)
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
      if (!done_ && finish_reason_.empty()) {
        model_.fail("stream from " + model_.config().base_url + " ended before it was complete (no [DONE])",
                    true);
      }
      return model_.make_response(std::move(text_), tools_.result(), finish_reason_, usage_, extra_);
    }

   private:
    void on_event(std::string_view data) {
      ++events_;
      if (data == "[DONE]") {
        done_ = true;
        return;
      }
      Value chunk = model_.parse_json(data, "a stream event");
      if (!chunk.is_object()) model_.fail("unexpected stream event: " + std::string(data.substr(0, 200)));
      if (auto e = chunk.find("error"); e != chunk.end() && !e->is_null()) {
        model_.fail("error in stream from " + model_.config().base_url + ": " + endpoint_error_message(data));
      }
      if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) usage_ = usage_from_json(*u);
      auto choices = chunk.find("choices");
      if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
      const Value& choice = (*choices)[0];
      if (!choice.is_object()) return;
      if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) finish_reason_ = *f;
      auto delta = choice.find("delta");
      if (delta == choice.end() || !delta->is_object()) return;
      if (auto c = delta->find("content"); c != delta->end() && c->is_string()) {
        const auto& piece = c->get_ref<const std::string&>();
        if (!piece.empty()) {
          text_ += piece;
          on_chunk_(piece);
        }
      }
      if (auto rc = delta->find("reasoning_content"); rc != delta->end() && rc->is_string()) {
        std::string so_far = extra_.value("reasoning_content", "");
        extra_["reasoning_content"] = so_far + rc->get<std::string>();
      }
      if (auto t = delta->find("tool_calls"); t != delta->end()) tools_.add(*t);
    }

    const OpenAIChatModel& model_;
    const std::function<void(std::string_view)>& on_chunk_;
    SseDecoder sse_;
    std::string head_;
    std::size_t events_ = 0;
    bool done_ = false;
    std::string text_;
    std::string finish_reason_;
    ToolCallAccumulator tools_;
    Usage usage_;
    Value extra_ = Value::object();
  };
};

}  // namespace

std::shared_ptr<ChatModel> make_openai_chat_model(const ModelConfig& config) {
  return std::make_shared<OpenAIChatModel>(config);
}

}  // namespace agentd::detail
