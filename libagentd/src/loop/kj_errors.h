// How agentd::Error crosses KJ promises. A kj::Promise can only reject with a kj::Exception, and
// KJ turns any other exception thrown in a continuation into a plain FAILED kj::Exception (losing
// its code and retryable flag). Code that may throw agentd::Error inside a continuation wraps it
// with rethrow_as_kj(); whoever finally awaits the promise turns the rejection back into the same
// agentd::Error with error_from_kj(). Any thread.
#pragma once

#include <agentd/error.h>

#include <kj/exception.h>

#include <exception>
#include <optional>
#include <string_view>
#include <utility>

namespace agentd::detail {

// The exception `e` as a kj::Exception: an agentd::Error is encoded (code, retryable, agent id
// and class) in the description, "agentd::Error[...]: <message>", so error_from_kj() gives it back
// whole; a disconnected one has type DISCONNECTED. A kj::Exception stays as it is; any other
// std::exception becomes FAILED with its what().
kj::Exception to_kj_exception(std::exception_ptr e);
inline kj::Exception to_kj_exception(Error e) {
  return to_kj_exception(std::make_exception_ptr(std::move(e)));
}

// The one mapping from a kj::Exception (a Cap'n Proto or KJ fault) to agentd::Error, on the
// server and the client alike. One made by to_kj_exception() gives back the agentd::Error it
// carries. Any other: DISCONNECTED -> disconnected, OVERLOADED -> overloaded, UNIMPLEMENTED ->
// bad_request (the other end has no such method), FAILED -> internal, with its description.
// context (e.g. "stop", "sending calls to host:port") prefixes the message: "<context>: ...".
Error error_from_kj(const kj::Exception& e, std::string_view context = {});

// Calls f(args...); anything it throws is thrown again as to_kj_exception() of it. For use inside
// .then() continuations whose code may throw agentd::Error.
template <typename F, typename... Args>
decltype(auto) rethrow_as_kj(F&& f, Args&&... args) {
  try {
    return std::forward<F>(f)(std::forward<Args>(args)...);
  } catch (const kj::Exception&) {
    throw;
  } catch (...) {
    kj::throwFatalException(to_kj_exception(std::current_exception()));
  }
}

}  // namespace agentd::detail
