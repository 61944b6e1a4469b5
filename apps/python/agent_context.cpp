// What hosted Python agent code reaches through `self`: agentd._AgentContext (id, memory, models,
// chunks, other agents), agentd._Memory, agentd.Model and agentd.ChatResponse; and the capsule
// the Python host plugin reads (hosting.h).
#include "agent_ref.h"
#include "errors.h"
#include "hosted_agent.h"
#include "hosting.h"
#include "values.h"

#include <agentd/client.h>
#include <agentd/model.h>
#include <agentd/tool.h>

#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentd::python {

namespace {

// A coroutine that starts at once and frees itself when done (model calls on the server loop).
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the bodies catch everything
  };
};

struct PyChatResponse {
  ChatResponse r;
};

std::vector<Msg> to_msgs(const py::handle& messages) {
  std::vector<Msg> out;
  if (py::isinstance<Msg>(messages)) {
    out.push_back(messages.cast<Msg>());
    return out;
  }
  for (auto m : messages) {
    if (py::isinstance<Msg>(m)) {
      out.push_back(m.cast<Msg>());
    } else if (py::isinstance<PyPlaceholder>(m)) {
      out.push_back(m.cast<PyPlaceholder&>().get(std::nullopt));
    } else if (PyDict_Check(m.ptr())) {
      out.push_back(msg_from_json(to_value(m)));
    } else {
      throw py::type_error("agentd: a model takes a list of agentd.Msg (or dicts with name, role, content)");
    }
  }
  return out;
}

ChatOptions chat_options(const py::object& generate_args, const py::object& tools,
                         std::optional<double> timeout) {
  ChatOptions o;
  if (!generate_args.is_none()) o.generate_args = to_value(generate_args);
  if (!tools.is_none()) o.tools = to_value(tools);
  if (timeout) o.timeout = to_millis(*timeout);
  return o;
}

// A model for a hosted agent: its context gives streamed pieces somewhere to go by default.
struct PyModel {
  std::shared_ptr<ChatModel> model;
  std::shared_ptr<AgentContext> ctx;
};

std::shared_ptr<Completions> completions_of_running_loop() {
  py::object loop = py::module_::import("asyncio").attr("get_running_loop")();
  return py::module_::import("agentd.agent")
      .attr("_completions_of")(loop)
      .cast<std::shared_ptr<Completions>>();
}

// Delivers a model call's end to the parked future (on its loop's thread, GIL held there).
void deliver(const std::weak_ptr<Completions>& weak, std::uint64_t token, std::optional<ChatResponse> r,
             std::optional<Error> err) {
  auto c = weak.lock();
  if (!c) return;
  c->post([weak, token, r = std::move(r), err = std::move(err)]() mutable {
    auto self = weak.lock();
    if (!self) return;
    py::object fut = self->take(token);
    if (err) return set_future_exception(fut, to_python(*err));
    set_future_result(fut, py::cast(PyChatResponse{std::move(*r)}));
  });
}

// Runs on the server's event loop: the model's asynchronous path (no thread while it waits).
Detached run_chat(std::shared_ptr<ChatModel> model, std::vector<Msg> msgs, ChatOptions options,
                  std::function<void(std::string_view)> on_chunk, std::weak_ptr<Completions> weak,
                  std::uint64_t token) {
  std::optional<ChatResponse> r;
  std::optional<Error> err;
  try {
    if (on_chunk) {
      r.emplace(co_await model->stream_async(std::move(msgs), std::move(on_chunk), std::move(options)));
    } else {
      r.emplace(co_await model->chat_async(std::move(msgs), std::move(options)));
    }
  } catch (const Error& e) {
    err.emplace(e);
  } catch (const std::exception& e) {
    err.emplace(Error(ErrorCode::model_error, e.what()));
  }
  deliver(weak, token, std::move(r), std::move(err));
}

// chat_async / stream_async: a future of the running asyncio loop, settled from the server loop.
py::object start_chat(PyModel& self, const py::object& messages, const py::object& on_chunk, bool stream,
                      ChatOptions options) {
  std::vector<Msg> msgs = to_msgs(messages);
  auto completions = completions_of_running_loop();
  py::object fut = completions->loop().attr("create_future")();
  detail::AsyncLoop* server = HostState::get().server_loop();
  if (server == nullptr)
    throw Error(ErrorCode::bad_request,
                "chat_async/stream_async run on as_server's event loop and are for asynchronous agents "
                "(async def reply); a blocking agent calls chat()/stream()");
  std::function<void(std::string_view)> sink;
  if (stream) {
    if (on_chunk.is_none()) {
      // Each piece becomes a chunk of the running reply (the server loop is a thread the call waits for).
      sink = [ctx = self.ctx](std::string_view piece) {
        if (ctx && ctx->host != nullptr) ctx->host->chunk(piece);
      };
    } else {
      sink = [weak = std::weak_ptr<Completions>(completions),
              cb = share_object(on_chunk)](std::string_view piece) {
        if (auto c = weak.lock()) c->post([cb, text = std::string(piece)] { (*cb)(py::str(text)); });
      };
    }
  }
  std::uint64_t token = completions->park(fut);
  server->post([model = self.model, msgs = std::move(msgs), options = std::move(options),
                sink = std::move(sink), weak = std::weak_ptr<Completions>(completions), token]() mutable {
    run_chat(std::move(model), std::move(msgs), std::move(options), std::move(sink), std::move(weak), token);
  });
  return fut;
}

// The tools of the hosting server's MCP tool servers (agentd/tool.h), for a hosted agent.
struct PyTools {
  std::shared_ptr<Tools> tools;
};

py::dict tool_info_dict(const ToolInfo& t) {
  py::dict d;
  d["name"] = t.qualified_name();
  d["server"] = t.server;
  d["tool"] = t.name;
  d["title"] = t.title;
  d["description"] = t.description;
  d["input_schema"] = from_value(t.input_schema);
  d["output_schema"] = from_value(t.output_schema);
  d["annotations"] = from_value(t.annotations);
  return d;
}

std::vector<std::string> tool_patterns(const py::object& patterns) {
  std::vector<std::string> out;
  if (patterns.is_none()) return out;
  if (py::isinstance<py::str>(patterns)) return {patterns.cast<std::string>()};
  for (auto p : patterns) out.push_back(py::cast<std::string>(p));
  return out;
}

ToolCallOptions tool_options(std::optional<double> timeout) {
  ToolCallOptions o;
  if (timeout) o.timeout = to_millis(*timeout);
  return o;
}

Value tool_arguments(const py::object& arguments) {
  if (arguments.is_none()) return Value::object();
  Value v = to_value(arguments);
  if (!v.is_object()) throw py::type_error("agentd: a tool's arguments are a dict (JSON object)");
  return v;
}

// Runs on the server's event loop: the tool call without a thread while it waits.
Detached run_tool_call(std::shared_ptr<Tools> tools, std::string name, Value arguments,
                       ToolCallOptions options, std::weak_ptr<Completions> weak, std::uint64_t token) {
  std::optional<ToolResult> r;
  std::optional<Error> err;
  try {
    r.emplace(co_await tools->call_async(std::move(name), std::move(arguments), std::move(options)));
  } catch (const Error& e) {
    err.emplace(e);
  } catch (const std::exception& e) {
    err.emplace(Error(ErrorCode::tool_error, e.what()));
  }
  auto c = weak.lock();
  if (!c) co_return;
  c->post([weak, token, r = std::move(r), err = std::move(err)]() mutable {
    auto self = weak.lock();
    if (!self) return;
    py::object fut = self->take(token);
    if (err) return set_future_exception(fut, to_python(*err));
    set_future_result(fut, py::cast(std::move(*r)));
  });
}

// A hosted agent's memory, through its context (an error, not a dangling reference, once the
// agent is deleted).
struct PyMemory {
  std::shared_ptr<AgentContext> ctx;
  Memory& get() const { return ctx->get().agent().memory(); }
};

py::object memory_list(const Memory& m) {
  py::list out;
  for (const auto& msg : m.get()) out.append(py::cast(msg));
  return out;
}

void memory_add(Memory& m, const py::handle& x) {
  if (x.is_none()) return;
  if (py::isinstance<Msg>(x)) return m.add(x.cast<Msg>());
  if (py::isinstance<PyPlaceholder>(x)) return m.add(x.cast<PyPlaceholder&>().get(std::nullopt));
  if (PyList_Check(x.ptr()) || PyTuple_Check(x.ptr())) {
    for (auto e : x) memory_add(m, e);
    return;
  }
  throw py::type_error("agentd: memory holds agentd.Msg (add a Msg, a list of them, or None)");
}

std::shared_ptr<ClientBox> hosted_box() {
  static auto box = [] {
    auto b = std::make_shared<ClientBox>();
    b->hosted = true;
    b->timeout = std::chrono::minutes(30);
    return b;
  }();
  return box;
}

}  // namespace

void bind_agent_context(py::module_& m) {
  py::class_<PyChatResponse>(m, "ChatResponse", "What a model call returns.")
      .def_property_readonly("msg", [](const PyChatResponse& r) { return r.r.msg; })
      .def_property_readonly("text", [](const PyChatResponse& r) { return r.r.msg.text(); })
      .def_property_readonly("content", [](const PyChatResponse& r) { return from_value(r.r.msg.content); })
      .def_property_readonly("usage",
                             [](const PyChatResponse& r) {
                               py::dict d;
                               d["prompt_tokens"] = r.r.usage.prompt_tokens;
                               d["completion_tokens"] = r.r.usage.completion_tokens;
                               d["total_tokens"] = r.r.usage.total_tokens;
                               return d;
                             })
      .def_property_readonly("latency", [](const PyChatResponse& r) { return r.r.latency.count() / 1000.0; })
      .def("__repr__", [](const PyChatResponse& r) {
        return "ChatResponse(text=" + std::string(py::repr(py::str(r.r.msg.text().substr(0, 60)))) + ")";
      });

  py::class_<PyModel>(m, "Model",
                      "A model configured on the hosting server (Agent.model(config_name)): the server's "
                      "retries, timeouts and token accounting apply.")
      .def_property_readonly("config_name", [](const PyModel& s) { return s.model->config_name(); })
      .def_property_readonly("model_type", [](const PyModel& s) { return s.model->model_type(); })
      .def(
          "chat",
          [](PyModel& s, const py::object& messages, const py::object& generate_args, const py::object& tools,
             std::optional<double> timeout) {
            auto msgs = to_msgs(messages);
            auto o = chat_options(generate_args, tools, timeout);
            py::gil_scoped_release release;
            return PyChatResponse{s.model->chat(msgs, o)};
          },
          py::arg("messages"), py::arg("generate_args") = py::none(), py::arg("tools") = py::none(),
          py::arg("timeout") = py::none(), "Asks the model (waits, without the GIL).")
      .def(
          "stream",
          [](PyModel& s, const py::object& messages, const py::object& on_chunk,
             const py::object& generate_args, const py::object& tools, std::optional<double> timeout) {
            auto msgs = to_msgs(messages);
            auto o = chat_options(generate_args, tools, timeout);
            auto ctx = s.ctx;
            std::function<void(std::string_view)> sink = [&on_chunk, ctx](std::string_view piece) {
              if (on_chunk.is_none()) {
                if (ctx && ctx->host != nullptr) ctx->host->chunk(piece);
                return;
              }
              py::gil_scoped_acquire gil;
              on_chunk(py::str(std::string(piece)));
            };
            py::gil_scoped_release release;
            return PyChatResponse{s.model->stream(msgs, sink, o)};
          },
          py::arg("messages"), py::arg("on_chunk") = py::none(), py::arg("generate_args") = py::none(),
          py::arg("tools") = py::none(), py::arg("timeout") = py::none(),
          "chat(), streamed: each piece goes to on_chunk(str), or (None) becomes a chunk of the running "
          "reply, as emit_chunk.")
      .def(
          "embed",
          [](PyModel& s, std::vector<std::string> texts, std::optional<double> timeout) {
            EmbedOptions o;
            if (timeout) o.timeout = to_millis(*timeout);
            py::gil_scoped_release release;
            return s.model->embed(texts, o).embeddings;
          },
          py::arg("texts"), py::arg("timeout") = py::none())
      .def(
          "chat_async",
          [](PyModel& s, const py::object& messages, const py::object& generate_args, const py::object& tools,
             std::optional<double> timeout) {
            return start_chat(s, messages, py::none(), false, chat_options(generate_args, tools, timeout));
          },
          py::arg("messages"), py::arg("generate_args") = py::none(), py::arg("tools") = py::none(),
          py::arg("timeout") = py::none(),
          "An awaitable chat() for async agents: the request runs on the server's event loop, no thread "
          "waits.")
      .def(
          "stream_async",
          [](PyModel& s, const py::object& messages, const py::object& on_chunk,
             const py::object& generate_args, const py::object& tools, std::optional<double> timeout) {
            return start_chat(s, messages, on_chunk, true, chat_options(generate_args, tools, timeout));
          },
          py::arg("messages"), py::arg("on_chunk") = py::none(), py::arg("generate_args") = py::none(),
          py::arg("tools") = py::none(), py::arg("timeout") = py::none(),
          "An awaitable stream() for async agents.");

  py::class_<PyMemory>(m, "_Memory", "A hosted agent's memory (the server's: saved with --state-dir).")
      .def(
          "add", [](PyMemory& mem, const py::object& x) { memory_add(mem.get(), x); }, py::arg("msg"))
      .def("get", [](PyMemory& mem) { return memory_list(mem.get()); })
      .def("clear", [](PyMemory& mem) { mem.get().clear(); })
      .def("size", [](PyMemory& mem) { return mem.get().size(); })
      .def("__len__", [](PyMemory& mem) { return mem.get().size(); });

  py::class_<ToolResult>(m, "ToolResult",
                         "What an MCP tool answered (Agent.tools.call): content blocks, structured "
                         "content, and whether the tool reports a failure of its own (is_error).")
      .def_property_readonly("content", [](const ToolResult& r) { return from_value(r.content); })
      .def_property_readonly("structured_content",
                             [](const ToolResult& r) { return from_value(r.structured_content); })
      .def_readonly("is_error", &ToolResult::is_error)
      .def_property_readonly("text", &ToolResult::text,
                             "The text blocks joined by newlines (others as JSON).")
      .def("to_dict", [](const ToolResult& r) { return from_value(r.to_value()); })
      .def("__repr__", [](const ToolResult& r) {
        return "agentd.ToolResult(is_error=" + std::string(r.is_error ? "True" : "False") +
               ", text=" + py::repr(py::str(r.text())).cast<std::string>() + ")";
      });

  py::class_<PyTools>(m, "Tools",
                      "The tools of the MCP servers configured on the hosting server "
                      "(as_server --tool-config-path), named SERVER/TOOL (Agent.tools).")
      .def(
          "list",
          [](const PyTools& t, const py::object& patterns) {
            auto wanted = tool_patterns(patterns);
            std::vector<ToolInfo> found;
            {
              py::gil_scoped_release release;
              found = t.tools->list(wanted);
            }
            py::list out;
            for (const auto& i : found) out.append(tool_info_dict(i));
            return out;
          },
          py::arg("patterns") = py::none(),
          "The tools matching patterns ('fs/*'; all when None) as dicts: name (SERVER/TOOL), server, "
          "tool, title, description, input_schema, output_schema, annotations.")
      .def(
          "call",
          [](const PyTools& t, const std::string& name, const py::object& arguments,
             std::optional<double> timeout) {
            Value args = tool_arguments(arguments);
            py::gil_scoped_release release;
            return t.tools->call(name, args, tool_options(timeout));
          },
          py::arg("name"), py::arg("arguments") = py::none(), py::arg("timeout") = py::none(),
          "Calls SERVER/TOOL with arguments (a dict) and waits, without the GIL; raises agentd.Error "
          "(tool_error, timeout). A blocking agent's form: an async agent awaits call_async.")
      .def(
          "call_async",
          [](const PyTools& t, const std::string& name, const py::object& arguments,
             std::optional<double> timeout) {
            Value args = tool_arguments(arguments);
            auto completions = completions_of_running_loop();
            py::object fut = completions->loop().attr("create_future")();
            detail::AsyncLoop* server = HostState::get().server_loop();
            if (server == nullptr)
              throw Error(ErrorCode::bad_request,
                          "tools.call_async runs on as_server's event loop and is for asynchronous agents "
                          "(async def reply); a blocking agent calls tools.call()");
            std::uint64_t token = completions->park(fut);
            server->post([tools = t.tools, name, args = std::move(args), options = tool_options(timeout),
                          weak = std::weak_ptr<Completions>(completions), token]() mutable {
              run_tool_call(std::move(tools), std::move(name), std::move(args), std::move(options),
                            std::move(weak), token);
            });
            return fut;
          },
          py::arg("name"), py::arg("arguments") = py::none(), py::arg("timeout") = py::none(),
          "await tools.call_async('fs/read_file', {'path': p}): the call on the server's event loop, "
          "no thread held while it runs.");

  py::class_<AgentContext, std::shared_ptr<AgentContext>>(m, "_AgentContext")
      .def_property_readonly("id", [](const AgentContext& c) { return c.get().agent().id(); })
      .def_property_readonly("memory", [](const std::shared_ptr<AgentContext>& c) { return PyMemory{c}; })
      .def_property_readonly("streaming", [](const AgentContext& c) { return c.get().is_streaming(); })
      .def("emit_chunk", [](const AgentContext& c, const std::string& text) { c.get().chunk(text); })
      .def("model",
           [](const std::shared_ptr<AgentContext>& c, const std::string& config) {
             return PyModel{c->get().agent().model(config), c};
           })
      .def("tools", [](const AgentContext& c) { return PyTools{c.get().agent().tools()}; })
      .def("connect", [](const AgentContext& c, const py::object& ref) {
        Value v = to_value(ref);
        Agent& a = c.get().agent();
        py::gil_scoped_release release;
        return PyAgentRef(connect_agent(a, v), hosted_box());
      });

  m.def(
      "_to_value", [](const py::object& o) { return from_value(to_value(o)); },
      "The value o is sent as (raises TypeError/ValueError for what cannot be sent).");
  m.def("_connect_ref", [](const py::object& ref) {
    Value v = to_value(ref);
    py::gil_scoped_release release;
    AgentRef r = AgentRef::from_value(v);
    return PyAgentRef(std::move(r), hosted_box());
  });

  static HostApi api;
  m.attr("_host_api") = py::capsule(&api, "agentd._host_api");
  m.def("_python_stalls", [] { return HostState::get().stalls(); });
}

void bind_hosting(py::module_& m) { bind_agent_context(m); }

}  // namespace agentd::python
