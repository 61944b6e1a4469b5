#include "outcome_codec.h"

#include "value_codec.h"

#include <fmt/format.h>

namespace agentd::detail {

std::size_t error_size(const Error& e) {
  return e.message().size() + e.agent_id().size() + e.agent_class().size() + 64;
}

namespace {
std::size_t usage_size(const CallUsage& u) { return u.empty() ? 0 : 32; }
}  // namespace

std::size_t outcome_size(const Outcome& o, std::uint64_t inline_limit) {
  if (const Msg* m = std::get_if<Msg>(&o)) {
    std::size_t size = approx_wire_size(*m);
    return usage_size(o.usage) + (inline_limit > 0 && size > inline_limit ? 16 : size);
  }
  return usage_size(o.usage) + error_size(std::get<Error>(o));
}

std::size_t outcome_size(const CallUsage& usage, const Msg* msg, const Error* error) {
  return usage_size(usage) + (msg != nullptr ? approx_wire_size(*msg) : error_size(*error));
}

void write_usage(const CallUsage& u, wire::Outcome::Builder out) {
  if (u.empty()) return;
  auto w = out.initUsage();
  w.setModelCalls(u.model_calls);
  w.setPromptTokens(u.prompt_tokens);
  w.setCompletionTokens(u.completion_tokens);
}

CallUsage read_usage(wire::Outcome::Reader in) {
  if (!in.hasUsage()) return {};
  auto r = in.getUsage();
  return CallUsage{r.getModelCalls(), r.getPromptTokens(), r.getCompletionTokens()};
}

void write_outcome(const Outcome& o, wire::Outcome::Builder out, std::uint64_t inline_limit) {
  write_usage(o.usage, out);
  if (const Msg* m = std::get_if<Msg>(&o)) {
    if (inline_limit > 0) {
      auto size = approx_wire_size(*m);
      if (size > inline_limit) {
        out.setTooLarge(size);
        return;
      }
    }
    write_msg(*m, out.initMsg());
  } else {
    write_error(std::get<Error>(o), out.initError());
  }
}

Outcome read_outcome(wire::Outcome::Reader in) {
  Outcome out = [&]() -> Outcome {
    switch (in.which()) {
      case wire::Outcome::MSG:
        return read_msg(in.getMsg());
      case wire::Outcome::ERROR:
        return read_error(in.getError());
      case wire::Outcome::TOO_LARGE:
        throw Error(ErrorCode::internal,
                    fmt::format("an outcome announced as too large ({} bytes) was read as a whole one",
                                in.getTooLarge()));
    }
    throw Error(ErrorCode::internal, "an outcome that is neither a message nor an error");
  }();
  out.usage = read_usage(in);
  return out;
}

Error unknown_agent_error(const std::string& id) {
  return Error(ErrorCode::unknown_agent, fmt::format("no agent '{}' on this server", id), id);
}

}  // namespace agentd::detail
