#include "value_codec.h"

#include "wire_limits.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace agentd::detail {

void write_value(const Value& v, wire::Value::Builder out) {
  switch (v.type()) {
    case Value::value_t::null:
    case Value::value_t::discarded:
      out.setNull();
      break;
    case Value::value_t::boolean:
      out.setBool(v.get<bool>());
      break;
    case Value::value_t::number_integer:
      out.setInt(v.get<std::int64_t>());
      break;
    case Value::value_t::number_unsigned:
      out.setUint(v.get<std::uint64_t>());
      break;
    case Value::value_t::number_float:
      out.setFloat(v.get<double>());
      break;
    case Value::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      out.setText(capnp::Text::Reader(s.data(), s.size()));
      break;
    }
    case Value::value_t::binary: {
      const auto& b = v.get_binary();
      out.setData(capnp::Data::Reader(b.data(), b.size()));
      break;
    }
    case Value::value_t::array: {
      auto list = out.initList(static_cast<unsigned>(v.size()));
      unsigned i = 0;
      for (const auto& e : v) write_value(e, list[i++]);
      break;
    }
    case Value::value_t::object: {
      auto fields = out.initObject(static_cast<unsigned>(v.size()));
      unsigned i = 0;
      for (auto it = v.begin(); it != v.end(); ++it, ++i) {
        fields[i].setKey(capnp::Text::Reader(it.key().data(), it.key().size()));
        write_value(it.value(), fields[i].initValue());
      }
      break;
    }
  }
}

namespace {

// A part that cannot be read: why, and the path to it (innermost first).
struct BadPart {
  std::string why;
  std::vector<std::string> path;
};

std::string text_of(capnp::Text::Reader t) {
  std::string s(t.cStr(), t.size());
  if (auto why = utf8_problem(s); !why.empty()) throw BadPart{"a string that is not UTF-8 (" + why + ")", {}};
  return s;
}

Value read(wire::Value::Reader in, int depth) {
  switch (in.which()) {
    case wire::Value::NULL_:
      return nullptr;
    case wire::Value::BOOL:
      return in.getBool();
    case wire::Value::INT:
      return in.getInt();
    case wire::Value::UINT:
      return in.getUint();
    case wire::Value::FLOAT:
      return in.getFloat();
    case wire::Value::TEXT:
      return text_of(in.getText());
    case wire::Value::DATA: {
      auto d = in.getData();
      return Value::binary(std::vector<std::uint8_t>(d.begin(), d.end()));
    }
    case wire::Value::LIST:
    case wire::Value::OBJECT:
      break;
  }
  if (in.which() != wire::Value::LIST && in.which() != wire::Value::OBJECT)
    return nullptr;  // a union tag from a newer peer: treat as null
  if (depth >= kMaxValueDepth)
    throw BadPart{fmt::format("a value nested deeper than {} levels of lists and objects, more "
                              "than a value may have",
                              kMaxValueDepth),
                  {}};
  if (in.which() == wire::Value::LIST) {
    Value out = Value::array();
    std::size_t i = 0;
    for (auto e : in.getList()) {
      try {
        out.push_back(read(e, depth + 1));
      } catch (BadPart& bad) {
        bad.path.push_back(std::to_string(i));
        throw;
      }
      ++i;
    }
    return out;
  }
  Value out = Value::object();
  for (auto f : in.getObject()) {
    std::string key;
    try {
      key = text_of(f.getKey());
    } catch (BadPart& bad) {
      bad.why = "a key that is not UTF-8" + bad.why.substr(bad.why.find(" ("));
      throw;
    }
    try {
      out[key] = read(f.getValue(), depth + 1);
    } catch (BadPart& bad) {
      bad.path.push_back(key.size() <= 40 ? key : key.substr(0, 37) + "...");
      throw;
    }
  }
  return out;
}

}  // namespace

Value read_value(wire::Value::Reader in, std::string_view what) {
  try {
    return read(in, 0);
  } catch (const BadPart& bad) {
    std::string at;
    for (auto it = bad.path.rbegin(); it != bad.path.rend(); ++it) at += "/" + *it;
    throw Error(ErrorCode::bad_request,
                fmt::format("{}{} holds {}; refused", what, at.empty() ? "" : " at " + at, bad.why));
  }
}

Value read_value(wire::Value::Reader in) { return read_value(in, "a value"); }

std::string read_text(capnp::Text::Reader t, std::string_view field) {
  std::string s(t.cStr(), t.size());
  if (auto why = utf8_problem(s); !why.empty())
    throw Error(ErrorCode::bad_request,
                fmt::format("{} is not UTF-8: {}; text must be UTF-8 (send bytes as binary)", field, why));
  return s;
}

std::string trace_id_problem(std::string_view id) {
  if (id.size() > kMaxTraceIdBytes)
    return fmt::format("the trace id is {} bytes, more than the {} allowed", id.size(), kMaxTraceIdBytes);
  for (std::size_t i = 0; i < id.size(); ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (c < 0x21 || c > 0x7e)
      return fmt::format(
          "the trace id holds byte 0x{:02x} at {}: only printable ASCII (no spaces) is allowed", c, i);
  }
  return {};
}

capnp::ReaderOptions wire_reader_options() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = kMaxMessageBytes / sizeof(capnp::word);
  o.nestingLimit = kWireNestingLimit;
  return o;
}

Error unreadable(const kj::Exception& e, std::string_view what) {
  std::string desc = e.getDescription().cStr();
  if (desc.find("nestingLimit") != std::string::npos || desc.find("too deeply-nested") != std::string::npos)
    return Error(ErrorCode::bad_request,
                 fmt::format("{} could not be read: a value in it is nested deeper than {} levels "
                             "of lists and objects, more than a value may have",
                             what, kMaxValueDepth));
  return Error(ErrorCode::bad_request, fmt::format("{} could not be read: {}", what, desc));
}

namespace {
std::size_t approx_size(const Value& v) {
  switch (v.type()) {
    case Value::value_t::string:
      return v.get_ref<const std::string&>().size() + 8;
    case Value::value_t::binary:
      return v.get_binary().size() + 8;
    case Value::value_t::array: {
      std::size_t n = 8;
      for (const auto& e : v) n += approx_size(e);
      return n;
    }
    case Value::value_t::object: {
      std::size_t n = 8;
      for (auto it = v.begin(); it != v.end(); ++it) n += it.key().size() + 16 + approx_size(it.value());
      return n;
    }
    default:
      return 16;
  }
}
}  // namespace

std::size_t approx_wire_size(const Msg& m) {
  std::size_t n = m.id.size() + m.name.size() + m.role.size() + m.timestamp.size() + 64;
  for (const auto& u : m.url) n += u.size() + 8;
  return n + approx_size(m.content) + approx_size(m.metadata);
}

std::size_t approx_wire_size(const Value& v) { return approx_size(v); }

void write_msg(const Msg& m, wire::Msg::Builder out) {
  out.setId(to_kj(m.id));
  out.setName(to_kj(m.name));
  out.setRole(to_kj(m.role));
  write_value(m.content, out.initContent());
  write_value(m.metadata, out.initMetadata());
  if (!m.url.empty()) {
    auto urls = out.initUrl(static_cast<unsigned>(m.url.size()));
    for (unsigned i = 0; i < m.url.size(); ++i) urls.set(i, to_kj(m.url[i]));
  }
  out.setTimestamp(to_kj(m.timestamp));
}

Msg read_msg(wire::Msg::Reader in) {
  Msg m;
  m.id = read_text(in.getId(), "the message's id");
  m.name = read_text(in.getName(), "the message's name");
  m.role = read_text(in.getRole(), "the message's role");
  m.content = read_value(in.getContent(), "the message's content");
  m.metadata = read_value(in.getMetadata(), "the message's metadata");
  for (auto u : in.getUrl()) m.url.push_back(read_text(u, "a url of the message"));
  m.timestamp = read_text(in.getTimestamp(), "the message's timestamp");
  return m;
}

wire::ErrorCode to_wire(ErrorCode code) {
  switch (code) {
    case ErrorCode::internal:
      return wire::ErrorCode::INTERNAL;
    case ErrorCode::unknown_agent:
      return wire::ErrorCode::UNKNOWN_AGENT;
    case ErrorCode::unknown_class:
      return wire::ErrorCode::UNKNOWN_CLASS;
    case ErrorCode::bad_args:
      return wire::ErrorCode::BAD_ARGS;
    case ErrorCode::agent_failed:
      return wire::ErrorCode::AGENT_FAILED;
    case ErrorCode::expired:
      return wire::ErrorCode::EXPIRED;
    case ErrorCode::duplicate_call_id:
      return wire::ErrorCode::DUPLICATE_CALL_ID;
    case ErrorCode::unknown_method:
      return wire::ErrorCode::UNKNOWN_METHOD;
    case ErrorCode::disconnected:
      return wire::ErrorCode::DISCONNECTED;
    case ErrorCode::timeout:
      return wire::ErrorCode::TIMEOUT;
    case ErrorCode::overloaded:
      return wire::ErrorCode::OVERLOADED;
    case ErrorCode::bad_request:
      return wire::ErrorCode::BAD_REQUEST;
    case ErrorCode::model_error:
      return wire::ErrorCode::MODEL_ERROR;
    case ErrorCode::unauthenticated:
      return wire::ErrorCode::UNAUTHENTICATED;
    case ErrorCode::duplicate_agent:
      return wire::ErrorCode::DUPLICATE_AGENT;
    case ErrorCode::stopping:
      return wire::ErrorCode::STOPPING;
    case ErrorCode::unknown_call:
      return wire::ErrorCode::UNKNOWN_CALL;
    case ErrorCode::config_error:
      return wire::ErrorCode::CONFIG_ERROR;
    case ErrorCode::plugin_error:
      return wire::ErrorCode::PLUGIN_ERROR;
    case ErrorCode::too_large:
      return wire::ErrorCode::TOO_LARGE;
    case ErrorCode::not_applied:
      return wire::ErrorCode::NOT_APPLIED;
    case ErrorCode::interrupted:
      return wire::ErrorCode::INTERRUPTED;
    case ErrorCode::tool_error:
      return wire::ErrorCode::TOOL_ERROR;
  }
  return wire::ErrorCode::INTERNAL;
}

ErrorCode from_wire(wire::ErrorCode code) {
  switch (code) {
    case wire::ErrorCode::INTERNAL:
      return ErrorCode::internal;
    case wire::ErrorCode::UNKNOWN_AGENT:
      return ErrorCode::unknown_agent;
    case wire::ErrorCode::UNKNOWN_CLASS:
      return ErrorCode::unknown_class;
    case wire::ErrorCode::BAD_ARGS:
      return ErrorCode::bad_args;
    case wire::ErrorCode::AGENT_FAILED:
      return ErrorCode::agent_failed;
    case wire::ErrorCode::EXPIRED:
      return ErrorCode::expired;
    case wire::ErrorCode::DUPLICATE_CALL_ID:
      return ErrorCode::duplicate_call_id;
    case wire::ErrorCode::UNKNOWN_METHOD:
      return ErrorCode::unknown_method;
    case wire::ErrorCode::DISCONNECTED:
      return ErrorCode::disconnected;
    case wire::ErrorCode::TIMEOUT:
      return ErrorCode::timeout;
    case wire::ErrorCode::OVERLOADED:
      return ErrorCode::overloaded;
    case wire::ErrorCode::BAD_REQUEST:
      return ErrorCode::bad_request;
    case wire::ErrorCode::MODEL_ERROR:
      return ErrorCode::model_error;
    case wire::ErrorCode::UNAUTHENTICATED:
      return ErrorCode::unauthenticated;
    case wire::ErrorCode::DUPLICATE_AGENT:
      return ErrorCode::duplicate_agent;
    case wire::ErrorCode::STOPPING:
      return ErrorCode::stopping;
    case wire::ErrorCode::UNKNOWN_CALL:
      return ErrorCode::unknown_call;
    case wire::ErrorCode::CONFIG_ERROR:
      return ErrorCode::config_error;
    case wire::ErrorCode::PLUGIN_ERROR:
      return ErrorCode::plugin_error;
    case wire::ErrorCode::TOO_LARGE:
      return ErrorCode::too_large;
    case wire::ErrorCode::NOT_APPLIED:
      return ErrorCode::not_applied;
    case wire::ErrorCode::INTERRUPTED:
      return ErrorCode::interrupted;
    case wire::ErrorCode::TOOL_ERROR:
      return ErrorCode::tool_error;
  }
  return ErrorCode::internal;
}

void write_error(const Error& e, wire::Error::Builder out) {
  out.setCode(to_wire(e.code()));
  // Errors are for people and quote what they were given: bytes that are not UTF-8 become
  // U+FFFD rather than make the error unreadable at the other end.
  out.setMessage(to_kj(utf8_replaced(e.message())));
  out.setAgentId(to_kj(utf8_replaced(e.agent_id())));
  out.setAgentClass(to_kj(utf8_replaced(e.agent_class())));
  out.setRetryable(e.retryable());
}

Error read_error(wire::Error::Reader in) {
  return Error(from_wire(in.getCode()), utf8_replaced(to_std(in.getMessage())),
               utf8_replaced(to_std(in.getAgentId())), utf8_replaced(to_std(in.getAgentClass())),
               in.getRetryable());
}

}  // namespace agentd::detail
