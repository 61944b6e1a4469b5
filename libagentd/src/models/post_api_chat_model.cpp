// post_api_chat: AgentScope's configurable generic POST. The request body is json_args with the
// messages (OpenAI's form) under messages_key; the reply text is read at response_path, or where
// AgentScope reads it (data.response.choices[0].message.content), or OpenAI's choices[0].message.content.
#include "chat_models.h"

namespace agentd::detail {
namespace {

// Follows a dotted path ("data.response.choices.0.message.content"); nullptr when absent.
const Value* find_path(const Value& root, std::string_view path) {
  const Value* v = &root;
  for (std::size_t start = 0; start <= path.size();) {
    std::size_t dot = path.find('.', start);
    if (dot == std::string_view::npos) dot = path.size();
    std::string key(path.substr(start, dot - start));
    start = dot + 1;
    if (v->is_object()) {
      auto it = v->find(key);
      if (it == v->end()) return nullptr;
      v = &*it;
    } else if (v->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
      std::size_t i = std::stoul(key);
      if (i >= v->size()) return nullptr;
      v = &(*v)[i];
    } else {
      return nullptr;
    }
  }
  return v;
}

class PostApiChatModel final : public HttpChatModel {
 public:
  using HttpChatModel::HttpChatModel;

 protected:
  bool can_stream() const override { return false; }

  std::vector<std::string> auth_headers() const override {
    if (config().api_key.empty()) return {};
    for (const auto& [name, value] : config().headers.items()) {
      std::string lower = name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "authorization") return {};
    }
    return HttpChatModel::auth_headers();
  }

  Request build_request(const std::vector<Msg>& messages, const ChatOptions& options, bool) const override {
    Request r;
    r.url = config().base_url;
    Value body = config().extra.value("json_args", Value::object());
    const Value args = merged_generate_args(options);
    for (const auto& [k, v] : args.items()) body[k] = v;
    if (options.tools.is_array() && !options.tools.empty()) body["tools"] = options.tools;
    body[config().extra.value("messages_key", std::string("inputs"))] = openai_messages(messages);
    r.body = std::move(body);
    return r;
  }

  ChatResponse parse_response(const Value& body) const override {
    const std::string path = config().extra.value("response_path", std::string());
    const Value* text = nullptr;
    const Value* message = nullptr;
    if (!path.empty()) {
      text = find_path(body, path);
      if (text == nullptr) {
        fail("answer from " + config().base_url + " has nothing at response_path '" + path +
             "': " + body.dump().substr(0, 200));
      }
    } else {
      for (const char* m : {"data.response.choices.0.message", "choices.0.message"}) {
        if ((message = find_path(body, m)) != nullptr && message->is_object()) break;
        message = nullptr;
      }
      if (message != nullptr) {
        text = find_path(*message, "content");
      } else {
        for (const char* t : {"data.response", "response", "text", "output.text", "output"}) {
          if ((text = find_path(body, t)) != nullptr && text->is_string()) break;
          text = nullptr;
        }
      }
      if (text == nullptr && message == nullptr) {
        fail("cannot find the reply in the answer from " + config().base_url +
             " (set response_path): " + body.dump().substr(0, 200));
      }
    }
    std::string reply = text == nullptr || text->is_null() ? ""
                        : text->is_string()                ? text->get<std::string>()
                                                           : text->dump();
    Value tool_calls = message != nullptr ? message->value("tool_calls", Value()) : Value();
    const Value* usage = find_path(body, "usage");
    if (usage == nullptr) usage = find_path(body, "data.response.usage");
    return make_response(std::move(reply), std::move(tool_calls), "",
                         usage_from_json(usage ? *usage : Value()));
  }

  std::unique_ptr<StreamParser> make_stream_parser(
      const std::function<void(std::string_view)>&) const override {
    return nullptr;  // can_stream() is false
  }
};

}  // namespace

std::shared_ptr<ChatModel> make_post_api_chat_model(const ModelConfig& config) {
  return std::make_shared<PostApiChatModel>(config);
}

}  // namespace agentd::detail
