#include "endpoint.h"

#include <agentd/error.h>

#include <charconv>
#include <fmt/format.h>

namespace agentd::net {

namespace {

constexpr std::string_view kUnix = "unix:";
// "unix": a host that could not be told from a socket path, and what address_part() calls a
// socket's peer.
constexpr std::string_view kUnixHost = kUnix.substr(0, kUnix.size() - 1);

// Why text is not an endpoint; empty when it is one (then out holds it).
std::string parse_into(std::string_view text, Endpoint& out) {
  if (text.substr(0, kUnix.size()) == kUnix) {
    if (text.size() == kUnix.size()) return "unix: names no socket path";
    out = Endpoint{};
    out.path = std::string(text.substr(kUnix.size()));
    return {};
  }
  auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return "no :PORT";
  std::string_view host = text.substr(0, colon);
  auto digits = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size())
    return fmt::format("the port \"{}\" is not a number", digits);
  if (value == 0 || value > 65535) return fmt::format("the port {} is not in 1..65535", digits);
  const bool bracketed = !host.empty() && host.front() == '[';
  if (bracketed) {
    if (host.size() < 3 || host.back() != ']') return "an IPv6 address needs [ADDRESS]";
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return "no host";
  // "[name]:port" would be written back as "name:port", which for "unix" is unix:PATH.
  if (host.find_first_of("[]") != std::string_view::npos ||
      (bracketed && host.find(':') == std::string_view::npos))
    return "brackets go around an IPv6 address only";
  out = Endpoint{};
  out.host = std::string(host);
  out.port = static_cast<std::uint16_t>(value);
  return {};
}

Error not_an_endpoint(std::string_view text, const std::string& why) {
  return Error(ErrorCode::bad_args,
               fmt::format("\"{}\" is not an endpoint ({}): expected HOST:PORT, [IPV6]:PORT or "
                           "unix:PATH",
                           text, why));
}

}  // namespace

std::optional<Endpoint> Endpoint::try_parse(std::string_view text) {
  Endpoint e;
  if (!parse_into(text, e).empty()) return std::nullopt;
  return e;
}

Endpoint Endpoint::parse(std::string_view text) {
  Endpoint e;
  if (auto why = parse_into(text, e); !why.empty()) throw not_an_endpoint(text, why);
  return e;
}

Endpoint Endpoint::from(std::string_view host, std::uint16_t port) {
  if (host.substr(0, kUnix.size()) == kUnix) return parse(host);
  if (host == kUnixHost)
    throw Error(ErrorCode::bad_args,
                fmt::format("the host \"unix\" with port {} cannot be told from unix:PATH; give its address, "
                            "or unix:PATH for a socket",
                            port));
  if (!host.empty() && host.front() == '[') return parse(fmt::format("{}:{}", host, port));
  // An IPv6 address without brackets gets them, so the one parser judges every form.
  const bool v6 = host.find(':') != std::string_view::npos;
  return parse(v6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port));
}

std::string Endpoint::host_text() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]", host) : host;
}

std::string Endpoint::text() const {
  if (is_unix()) return fmt::format("{}{}", kUnix, path);
  return fmt::format("{}:{}", host_text(), port);
}

std::string address_part(std::string_view peer) {
  auto e = Endpoint::try_parse(peer);
  if (!e) return std::string(peer);
  if (e->is_unix()) return std::string(kUnixHost);
  return e->host_text();
}

}  // namespace agentd::net
