#include "chat_models.h"

#include <agentd/error.h>
#include <agentd/value_limits.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace agentd::detail {

HttpModel::HttpModel(ModelConfig config) : config_(std::move(config)) {
  retry_.max_retries = config_.max_retries;
  retry_.initial_delay = config_.retry_initial_delay;
  retry_.max_delay = config_.retry_max_delay;
  if (config_.headers.is_object()) {
    for (const auto& [name, value] : config_.headers.items()) {
      headers_.push_back(name + ": " +
                         (value.is_string() ? value.get<std::string>()
                                            : value.dump(-1, ' ', false, Value::error_handler_t::replace)));
    }
  }
}

std::vector<std::string> HttpModel::auth_headers() const {
  if (config_.api_key.empty()) return {};
  return {"Authorization: Bearer " + config_.api_key};
}

void HttpModel::fail(std::string message, bool retryable) const {
  throw_model_error(site(), std::move(message), retryable);
}

Value HttpModel::parse_json(std::string_view text, std::string_view what) const {
  // Bounded: an answer nested deeper than a value may be is refused before it is built.
  ParsedValue parsed = parse_value(text);
  if (!parsed) {
    std::string start = utf8_replaced(text.substr(0, 200));
    fail("invalid JSON in " + std::string(what) + " from " + config_.base_url + " (" + parsed.error +
         "): \"" + start + (text.size() > 200 ? "...\"" : "\""));
  }
  return std::move(parsed.value);
}

HttpRequest HttpModel::make_http_request(std::string url, const Value& body,
                                         std::vector<std::string> extra_headers,
                                         std::chrono::milliseconds timeout, bool stream) const {
  HttpRequest request;
  request.url = std::move(url);
  request.body = body.dump(-1, ' ', false, Value::error_handler_t::replace);
  request.headers = headers_;
  for (auto& h : auth_headers()) request.headers.push_back(std::move(h));
  for (auto& h : extra_headers) request.headers.push_back(std::move(h));
  request.timeout = timeout;
  request.stream = stream;
  return request;
}

Value HttpChatModel::merged_generate_args(const ChatOptions& options) const {
  Value args = config().generate_args.is_object() ? config().generate_args : Value::object();
  if (options.generate_args.is_object()) {
    for (const auto& [k, v] : options.generate_args.items()) args[k] = v;
  }
  args.erase("stream");
  return args;
}

ChatResponse HttpChatModel::make_response(std::string text, Value tool_calls, std::string finish_reason,
                                          Usage usage, Value extra_metadata) const {
  if (usage.total_tokens == 0) usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  ChatResponse r;
  r.msg = Msg("assistant", Value(std::move(text)), "assistant");
  Value meta = Value::object();
  meta["config_name"] = config().config_name;
  meta["model_type"] = config().model_type;
  if (!config().model_name.empty()) meta["model_name"] = config().model_name;
  if (!finish_reason.empty()) meta["finish_reason"] = finish_reason;
  meta["usage"] = {{"prompt_tokens", usage.prompt_tokens},
                   {"completion_tokens", usage.completion_tokens},
                   {"total_tokens", usage.total_tokens}};
  if (tool_calls.is_array() && !tool_calls.empty()) meta["tool_calls"] = std::move(tool_calls);
  if (extra_metadata.is_object()) {
    for (auto& [k, v] : extra_metadata.items()) meta[k] = v;
  }
  r.msg.metadata = std::move(meta);
  r.usage = usage;
  return r;
}

ChatResponse HttpChatModel::chat(const std::vector<Msg>& messages, const ChatOptions& options) {
  return run(messages, nullptr, options, config().stream && can_stream());
}

ChatResponse HttpChatModel::stream(const std::vector<Msg>& messages,
                                   const std::function<void(std::string_view)>& on_chunk,
                                   const ChatOptions& options) {
  if (!can_stream()) {
    ChatResponse r = run(messages, nullptr, options, false);
    if (on_chunk) on_chunk(r.msg.text());
    return r;
  }
  return run(messages, &on_chunk, options, true);
}

HttpRequest HttpChatModel::prepare(const std::vector<Msg>& messages, const ChatOptions& options,
                                   bool stream) const {
  Request built = build_request(messages, options, stream);
  return make_http_request(std::move(built.url), built.body, std::move(built.headers),
                           options.timeout.value_or(config().timeout), stream);
}

ChatResponse HttpChatModel::run(const std::vector<Msg>& messages,
                                const std::function<void(std::string_view)>* on_chunk,
                                const ChatOptions& options, bool stream) {
  const auto started = std::chrono::steady_clock::now();
  HttpRequest request = prepare(messages, options, stream);

  ChatResponse response;
  if (stream) {
    static const std::function<void(std::string_view)> ignore = [](std::string_view) {};
    // One parser serves all attempts: post_with_retries retries only before any byte reached it.
    std::unique_ptr<StreamParser> parser =
        make_stream_parser(on_chunk != nullptr && *on_chunk ? *on_chunk : ignore);
    post_with_retries(site(), retry_policy(), request,
                      [&parser](std::string_view bytes) { parser->feed(bytes); });
    response = parser->finish();
  } else {
    HttpResponse http = post_with_retries(site(), retry_policy(), request);
    response = parse_response(parse_json(http.body, "the answer"));
  }
  response.latency =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  return response;
}

kj::Promise<ChatResponse> HttpChatModel::chat_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                                    const ChatOptions& options) {
  return run_async(http, messages, {}, options, config().stream && can_stream());
}

kj::Promise<ChatResponse> HttpChatModel::stream_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                                      ChunkCallback on_chunk, const ChatOptions& options) {
  if (!can_stream()) {
    return run_async(http, messages, {}, options, false)
        .then([on_chunk = std::move(on_chunk)](ChatResponse r) {
          if (on_chunk) rethrow_as_kj([&] { on_chunk(r.msg.text()); });
          return r;
        })
        .eagerlyEvaluate(nullptr);
  }
  return run_async(http, messages, std::move(on_chunk), options, true);
}

// The asynchronous run(): the same request, retries and parsing, awaited on http's loop. The
// request is built at once (messages and options are not kept); the call then waits for its
// place among config().max_concurrency, which it holds until it settles.
kj::Promise<ChatResponse> HttpChatModel::run_async(AsyncHttp& http, const std::vector<Msg>& messages,
                                                   ChunkCallback on_chunk, const ChatOptions& options,
                                                   bool stream) {
  // The parser and the chunk callback it borrows are shared with the transfer's sink: a call
  // dropped from inside its own chunk callback must not free the parser under its feet (the
  // transfer keeps them until libcurl has returned).
  struct Stream {
    ChunkCallback on_chunk;
    std::unique_ptr<StreamParser> parser;  // borrows on_chunk
  };
  struct Call {
    HttpRequest request;
    std::shared_ptr<Stream> stream;
    std::chrono::steady_clock::time_point started;
    // Freed as soon as the answer is in (the promise itself may be kept much longer).
    kj::Own<AsyncHttp::Permit> permit;
  };
  auto call = kj::heap<Call>();
  try {
    call->request = prepare(messages, options, stream);
  } catch (...) {
    return kj::Promise<ChatResponse>(to_kj_exception(std::current_exception()));
  }
  if (stream) {
    call->stream = std::make_shared<Stream>();
    call->stream->on_chunk = on_chunk ? std::move(on_chunk) : [](std::string_view) {};
    call->stream->parser = make_stream_parser(call->stream->on_chunk);
  }
  Call& c = *call;
  auto limit = static_cast<std::size_t>(config().max_concurrency);
  return http.admit(config().config_name, limit)
      .then([this, &http, &c](kj::Own<AsyncHttp::Permit> permit) {
        c.permit = kj::mv(permit);
        c.started = std::chrono::steady_clock::now();
        kj::Promise<ChatResponse> answer = nullptr;
        if (c.stream) {
          answer = http.post_with_retries(
                           site(), retry_policy(), kj::mv(c.request),
                           [shared = c.stream](std::string_view bytes) { shared->parser->feed(bytes); })
                       .then([&c](HttpResponse) {
                         return rethrow_as_kj([&c] { return c.stream->parser->finish(); });
                       });
        } else {
          answer =
              http.post_with_retries(site(), retry_policy(), kj::mv(c.request)).then([this](HttpResponse r) {
                return rethrow_as_kj([&] { return parse_response(parse_json(r.body, "the answer")); });
              });
        }
        return answer;
      })
      .then(
          [&c](ChatResponse response) {
            c.permit = nullptr;
            return response;
          },
          [&c](kj::Exception&& e) -> ChatResponse {
            c.permit = nullptr;
            kj::throwFatalException(kj::mv(e));
          })
      .then([&c](ChatResponse response) {
        response.latency = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - c.started);
        return response;
      })
      .attach(kj::mv(call))
      // KJ runs continuations when the consumer takes the result (a joinPromises() only at its
      // end): evaluate eagerly so the place is freed and the latency taken when the answer is in.
      .eagerlyEvaluate(nullptr);
}

// ---------------------------------------------------------------------------------------------

Value openai_messages(const std::vector<Msg>& messages) {
  Value out = Value::array();
  for (const Msg& m : messages) {
    Value msg = Value::object();
    msg["role"] = m.role.empty() ? "user" : m.role;
    if (m.content.is_string()) {
      msg["content"] = m.content;
    } else if (m.content.is_null()) {
      msg["content"] = "";
    } else if (m.content.is_array() && !m.content.empty() &&
               std::all_of(m.content.begin(), m.content.end(),
                           [](const Value& part) { return part.is_object() && part.contains("type"); })) {
      msg["content"] = m.content;  // OpenAI content parts (text, image_url, ...)
    } else {
      msg["content"] = m.text();
    }
    if (m.metadata.is_object()) {
      if (auto calls = m.metadata.find("tool_calls");
          calls != m.metadata.end() && calls->is_array() && !calls->empty()) {
        msg["tool_calls"] = *calls;
        if (msg["content"] == "") msg["content"] = nullptr;
      }
      if (auto id = m.metadata.find("tool_call_id"); id != m.metadata.end() && id->is_string()) {
        msg["tool_call_id"] = *id;
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

void ToolCallAccumulator::add(const Value& deltas) {
  if (!deltas.is_array()) return;
  for (const Value& d : deltas) {
    if (!d.is_object()) continue;
    std::size_t index = calls_.size();
    if (auto i = d.find("index"); i != d.end() && i->is_number_unsigned()) {
      index = i->get<std::size_t>();
    } else if (auto id = d.find("id");
               id != d.end() && id->is_string() && !calls_.empty() && calls_.back()["id"] == *id) {
      index = calls_.size() - 1;  // no index: a continuation of the last call with the same id
    } else if (!calls_.empty() && (!d.contains("id") || d["id"] == "" || d["id"].is_null())) {
      index = calls_.size() - 1;
    }
    if (index > 1024) continue;
    while (calls_.size() <= index) {
      calls_.push_back({{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
    }
    Value& call = calls_[index];
    if (auto id = d.find("id"); id != d.end() && id->is_string() && !id->get<std::string>().empty()) {
      call["id"] = *id;
    }
    if (auto type = d.find("type");
        type != d.end() && type->is_string() && !type->get<std::string>().empty()) {
      call["type"] = *type;
    }
    if (auto fn = d.find("function"); fn != d.end() && fn->is_object()) {
      if (auto name = fn->find("name"); name != fn->end() && name->is_string()) {
        std::string n = name->get<std::string>();
        if (!n.empty()) call["function"]["name"] = n;
      }
      if (auto args = fn->find("arguments"); args != fn->end()) {
        std::string piece = args->is_string() ? args->get<std::string>()
                            : args->is_null() ? ""
                                              : args->dump();
        call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() + piece;
      }
    }
  }
}

Value ToolCallAccumulator::result() const { return calls_.empty() ? Value() : calls_; }

Value tool_call_arguments(const Value& args) {
  if (!args.is_string()) return args.is_object() ? args : Value::object();
  Value parsed = parse_value(args.get<std::string>()).value;
  return parsed.is_object() ? parsed : Value::object();
}

Usage usage_from_json(const Value& usage) {
  Usage u;
  if (!usage.is_object()) return u;
  auto get = [&usage](std::initializer_list<const char*> keys) -> std::int64_t {
    for (const char* k : keys) {
      if (auto it = usage.find(k); it != usage.end() && it->is_number()) return it->get<std::int64_t>();
    }
    return 0;
  };
  u.prompt_tokens = get({"prompt_tokens", "input_tokens"});
  u.completion_tokens = get({"completion_tokens", "output_tokens"});
  u.total_tokens = get({"total_tokens"});
  if (u.total_tokens == 0) u.total_tokens = u.prompt_tokens + u.completion_tokens;
  return u;
}

std::int64_t count_words(std::string_view text) {
  std::int64_t n = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

}  // namespace agentd::detail
