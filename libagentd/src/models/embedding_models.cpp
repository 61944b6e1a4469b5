// The embedding model types; each POSTs the texts in one request, with the same retries and errors
// as the chat types:
//   openai_embedding, zhipuai_embedding  POST {base_url}/embeddings (OpenAI's API; any compatible endpoint)
//   ollama_embedding                     POST {host}/api/embed
//   dashscope_text_embedding             POST {base_url}/services/embeddings/text-embedding/text-embedding
//   gemini_embedding                     POST {base_url}/models/{model}:batchEmbedContents
#include "chat_models.h"

#include <agentd/error.h>

#include <chrono>

namespace agentd {

EmbeddingResponse ChatModel::embed(const std::vector<std::string>& /*texts*/,
                                   const EmbedOptions& /*options*/) {
  throw Error(ErrorCode::model_error, "model '" + config_name() + "' (model_type " + model_type() +
                                          ") does not make embeddings; configure an embedding type "
                                          "(openai_embedding, ollama_embedding, ...) for embed()");
}

}  // namespace agentd

namespace agentd::detail {
namespace {

class EmbeddingModel final : public HttpModel {
 public:
  using HttpModel::HttpModel;

  ChatResponse chat(const std::vector<Msg>& /*messages*/, const ChatOptions& /*options*/) override {
    fail("model_type " + config().model_type + " makes embeddings, it does not chat; use embed()");
  }
  ChatResponse stream(const std::vector<Msg>& messages,
                      const std::function<void(std::string_view)>& /*on_chunk*/,
                      const ChatOptions& options) override {
    return chat(messages, options);
  }

  EmbeddingResponse embed(const std::vector<std::string>& texts, const EmbedOptions& options) override {
    const auto started = std::chrono::steady_clock::now();
    EmbeddingResponse r;
    if (texts.empty()) return r;
    Value args = config().generate_args.is_object() ? config().generate_args : Value::object();
    for (const auto& [k, v] : options.generate_args.items()) args[k] = v;
    std::string url;
    Value body = Value::object();
    const std::string& type = config().model_type;
    const std::string& model = config().model_name;
    if (type == "ollama_embedding") {
      url = config().base_url + "/api/embed";
      body = {{"model", model}, {"input", texts}};
      Value model_options = config().extra.value("options", Value::object());
      for (const auto& [k, v] : args.items()) {
        if (k == "truncate" || k == "keep_alive" || k == "dimensions") {
          body[k] = v;
        } else {
          model_options[k] = v;
        }
      }
      if (!model_options.empty()) body["options"] = std::move(model_options);
      if (config().extra.contains("keep_alive") && !body.contains("keep_alive")) {
        body["keep_alive"] = config().extra["keep_alive"];
      }
    } else if (type == "dashscope_text_embedding") {
      url = config().base_url + "/services/embeddings/text-embedding/text-embedding";
      body = {{"model", model}, {"input", {{"texts", texts}}}};
      if (!args.empty()) body["parameters"] = args;
    } else if (type == "gemini_embedding") {
      const std::string path = model.rfind("models/", 0) == 0 ? model : "models/" + model;
      url = config().base_url + "/" + path + ":batchEmbedContents";
      Value requests = Value::array();
      for (const auto& t : texts) {
        Value one = {{"model", path}, {"content", {{"parts", Value::array({{{"text", t}}})}}}};
        for (const auto& [k, v] : args.items()) one[k] = v;  // taskType, outputDimensionality, title
        requests.push_back(std::move(one));
      }
      body = {{"requests", std::move(requests)}};
    } else {  // openai_embedding, zhipuai_embedding
      url = config().base_url + "/embeddings";
      body = {{"model", model}, {"input", texts}};
      for (const auto& [k, v] : args.items()) body[k] = v;
    }

    HttpRequest request =
        make_http_request(std::move(url), body, {}, options.timeout.value_or(config().timeout), false);
    HttpResponse http = post_with_retries(site(), retry_policy(), request);
    parse(parse_json(http.body, "the answer"), texts.size(), r);
    r.latency =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    return r;
  }

 protected:
  std::vector<std::string> auth_headers() const override {
    if (config().api_key.empty()) return {};
    if (config().model_type == "gemini_embedding") return {"x-goog-api-key: " + config().api_key};
    return {"Authorization: Bearer " + config().api_key};
  }

 private:
  [[noreturn]] void unexpected(const Value& body, std::string_view what) const {
    fail("unexpected answer from " + config().base_url + " (" + std::string(what) +
         "): " + body.dump().substr(0, 200));
  }

  std::vector<double> vector_of(const Value& v, const Value& body) const {
    if (!v.is_array() || v.empty()) unexpected(body, "an embedding is not a list of numbers");
    std::vector<double> out;
    out.reserve(v.size());
    for (const Value& x : v) {
      if (!x.is_number()) unexpected(body, "an embedding is not a list of numbers");
      out.push_back(x.get<double>());
    }
    return out;
  }

  // Fills r.embeddings (in input order) and r.usage; fails unless there is one vector per text.
  void parse(const Value& body, std::size_t count, EmbeddingResponse& r) const {
    if (!body.is_object()) unexpected(body, "not an object");
    const std::string& type = config().model_type;
    if ((body.contains("error") && !body["error"].is_null()) ||
        (type == "dashscope_text_embedding" && body.contains("code") && !body.contains("output"))) {
      fail("error from " + config().base_url + ": " + endpoint_error_message(body.dump()));
    }
    std::vector<std::pair<std::size_t, std::vector<double>>> indexed;
    if (type == "ollama_embedding") {
      const Value list = body.value("embeddings", Value());
      if (!list.is_array()) unexpected(body, "no embeddings");
      for (std::size_t i = 0; i < list.size(); ++i) indexed.emplace_back(i, vector_of(list[i], body));
      r.usage.prompt_tokens = body.value("prompt_eval_count", std::int64_t{0});
    } else if (type == "gemini_embedding") {
      const Value list = body.value("embeddings", Value());
      if (!list.is_array()) unexpected(body, "no embeddings");
      for (std::size_t i = 0; i < list.size(); ++i) {
        indexed.emplace_back(
            i, vector_of(list[i].is_object() ? list[i].value("values", Value()) : Value(), body));
      }
    } else {
      const bool dashscope = type == "dashscope_text_embedding";
      const Value list = dashscope ? body.value("output", Value::object()).value("embeddings", Value())
                                   : body.value("data", Value());
      if (!list.is_array()) unexpected(body, dashscope ? "no output.embeddings" : "no data");
      const char* index_key = dashscope ? "text_index" : "index";
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_object()) unexpected(body, "an embedding entry is not an object");
        const Value index = list[i].value(index_key, Value(i));
        if (!index.is_number_unsigned()) unexpected(body, "bad index");
        indexed.emplace_back(index.get<std::size_t>(), vector_of(list[i].value("embedding", Value()), body));
      }
      r.usage = usage_from_json(body.value("usage", Value()));
      if (r.usage.prompt_tokens == 0) r.usage.prompt_tokens = r.usage.total_tokens;  // DashScope: total only
    }
    if (indexed.size() != count) {
      unexpected(body,
                 std::to_string(indexed.size()) + " embeddings for " + std::to_string(count) + " texts");
    }
    r.embeddings.assign(count, {});
    for (auto& [i, v] : indexed) {
      if (i >= count || !r.embeddings[i].empty()) unexpected(body, "bad or repeated index");
      r.embeddings[i] = std::move(v);
    }
    r.usage.completion_tokens = 0;
    r.usage.total_tokens = r.usage.prompt_tokens;
  }
};

}  // namespace

std::shared_ptr<ChatModel> make_embedding_model(const ModelConfig& config) {
  return std::make_shared<EmbeddingModel>(config);
}

}  // namespace agentd::detail
