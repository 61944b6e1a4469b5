#include "kj_errors.h"

#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>

namespace agentd::detail {
namespace {

constexpr std::string_view kPrefix = "agentd::Error[";

}  // namespace

kj::Exception to_kj_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const kj::Exception& k) {
    return k;
  } catch (const Error& err) {
    // agentd::Error[<code> <retryable> <id bytes> <class bytes>]: <agent id><agent class><message>
    std::string text(kPrefix);
    text += std::string(to_string(err.code())) + ' ' + (err.retryable() ? '1' : '0') + ' ' +
            std::to_string(err.agent_id().size()) + ' ' + std::to_string(err.agent_class().size()) + "]: ";
    text += err.agent_id() + err.agent_class() + err.message();
    auto type = err.code() == ErrorCode::disconnected ? kj::Exception::Type::DISCONNECTED
                                                      : kj::Exception::Type::FAILED;
    return kj::Exception(type, __FILE__, __LINE__, kj::heapString(text.data(), text.size()));
  } catch (const std::exception& other) {
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(other.what()));
  } catch (...) {
    return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                         kj::heapString("unknown exception"));
  }
}

Error error_from_kj(const kj::Exception& e, std::string_view context) {
  std::string_view d(e.getDescription().cStr(), e.getDescription().size());
  auto in_context = [context](std::string message) {
    return context.empty() ? message : std::string(context) + ": " + message;
  };
  if (d.substr(0, kPrefix.size()) == kPrefix) {
    std::string_view rest = d.substr(kPrefix.size());
    auto close = rest.find("]: ");
    if (close != std::string_view::npos) {
      std::string_view head = rest.substr(0, close);
      std::string_view body = rest.substr(close + 3);
      auto sp1 = head.find(' ');
      auto sp2 = head.find(' ', sp1 + 1);
      auto sp3 = head.find(' ', sp2 + 1);
      std::size_t id_len = 0;
      std::size_t class_len = 0;
      if (sp1 != std::string_view::npos && sp2 != std::string_view::npos && sp3 != std::string_view::npos &&
          std::from_chars(head.data() + sp2 + 1, head.data() + sp3, id_len).ec == std::errc() &&
          std::from_chars(head.data() + sp3 + 1, head.data() + head.size(), class_len).ec == std::errc() &&
          id_len + class_len <= body.size()) {
        ErrorCode code = error_code_from_string(head.substr(0, sp1));
        bool retryable = head.substr(sp1 + 1, sp2 - sp1 - 1) == "1";
        return Error(code, in_context(std::string(body.substr(id_len + class_len))),
                     std::string(body.substr(0, id_len)), std::string(body.substr(id_len, class_len)),
                     retryable);
      }
    }
  }
  std::string message = in_context(std::string(d));
  switch (e.getType()) {
    case kj::Exception::Type::DISCONNECTED:
      return Error(ErrorCode::disconnected, message);
    case kj::Exception::Type::OVERLOADED:
      return Error(ErrorCode::overloaded, message);
    case kj::Exception::Type::UNIMPLEMENTED:
      return Error(ErrorCode::bad_request, message);
    case kj::Exception::Type::FAILED:
      break;
  }
  return Error(ErrorCode::internal, message);
}

}  // namespace agentd::detail
