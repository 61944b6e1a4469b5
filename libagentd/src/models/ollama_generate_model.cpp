// ollama_generate: Ollama's completion API, POST {host}/api/generate; streams newline-delimited
// JSON. The messages become one prompt as AgentScope's OllamaGenerationWrapper writes it: system
// messages go to `system`, the others are "name: text" lines (just the text for a lone message).
#include "chat_models.h"

namespace agentd::detail {
namespace {

bool is_ollama_generate_request_key(const std::string& key) {
  return key == "format" || key == "keep_alive" || key == "think" || key == "raw" || key == "suffix" ||
         key == "template" || key == "context" || key == "images";
}

class OllamaGenerateModel final : public StreamingChatModel<OllamaGenerateModel> {
 public:
  using StreamingChatModel::StreamingChatModel;

  friend class StreamingChatModel<OllamaGenerateModel>;  // makes our Parser

 protected:
  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options,
                        bool stream) const override {
    Request r;
    r.url = config().base_url + "/api/generate";
    std::string system;
    std::vector<const Msg*> dialogue;
    for (const Msg& m : messages) {
      if (m.role == "system") {
        system += (system.empty() ? "" : "\n") + m.text();
      } else {
        dialogue.push_back(&m);
      }
    }
    std::string prompt;
    if (dialogue.size() == 1) {
      prompt = dialogue[0]->text();
    } else {
      for (const Msg* m : dialogue) {
        prompt += (prompt.empty() ? "" : "\n") + (m->name.empty() ? m->role : m->name) + ": " + m->text();
      }
    }
    Value body = {{"model", config().model_name}, {"prompt", prompt}, {"stream", stream}};
    if (!system.empty()) body["system"] = system;
    Value model_options = config().extra.value("options", Value::object());
    const Value args = merged_generate_args(options);
    for (const auto& [k, v] : args.items()) {
      if (is_ollama_generate_request_key(k)) {
        body[k] = v;
      } else if (k == "options" && v.is_object()) {
        for (const auto& [ok, ov] : v.items()) model_options[ok] = ov;
      } else {
        model_options[k] = v;
      }
    }
    if (!model_options.empty()) body["options"] = std::move(model_options);
    if (config().extra.contains("keep_alive") && !body.contains("keep_alive")) {
      body["keep_alive"] = config().extra["keep_alive"];
    }
    r.body = std::move(body);
    return r;
  }

  Usage usage_of(const Value& body) const {
    Usage u;
    u.prompt_tokens = body.value("prompt_eval_count", std::int64_t{0});
    u.completion_tokens = body.value("eval_count", std::int64_t{0});
    return u;
  }

  void check(const Value& body, std::string_view what) const {
    if (!body.is_object()) fail("unexpected " + std::string(what) + " from " + config().base_url);
    if (auto e = body.find("error"); e != body.end() && !e->is_null()) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
  }

  ChatResponse parse_response(const Value& body) const override {
    check(body, "answer");
    auto response = body.find("response");
    if (response == body.end() || !response->is_string()) {
      fail("unexpected answer from " + config().base_url + " (no response): " + body.dump().substr(0, 200));
    }
    return make_response(response->get<std::string>(), Value(), body.value("done_reason", ""),
                         usage_of(body));
  }

  class Parser final : public StreamParser {
   public:
    Parser(const OllamaGenerateModel& model, const std::function<void(std::string_view)>& on_chunk)
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
      return model_.make_response(std::move(text_), Value(), finish_reason_, usage_);
    }

   private:
    void on_line(std::string_view line) {
      if (line.find_first_not_of(" \t") == std::string_view::npos) return;
      Value chunk = model_.parse_json(line, "a stream line");
      model_.check(chunk, "stream line");
      if (auto r = chunk.find("response");
          r != chunk.end() && r->is_string() && !r->get_ref<const std::string&>().empty()) {
        text_ += r->get<std::string>();
        on_chunk_(r->get_ref<const std::string&>());
      }
      if (chunk.value("done", false)) {
        done_ = true;
        finish_reason_ = chunk.value("done_reason", "stop");
        usage_ = model_.usage_of(chunk);
      }
    }

    const OllamaGenerateModel& model_;
    const std::function<void(std::string_view)>& on_chunk_;
    LineSplitter lines_;
    bool done_ = false;
    std::string text_;
    std::string finish_reason_;
    Usage usage_;
  };
};

}  // namespace

std::shared_ptr<ChatModel> make_ollama_generate_model(const ModelConfig& config) {
  return std::make_shared<OllamaGenerateModel>(config);
}

}  // namespace agentd::detail
