// Endpoint: where a server listens or a client connects, with the one parser and the one
// formatter of its text forms: "host:port", "[v6]:port" and "unix:PATH". Every layer that
// splits or joins an address uses these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace agentd::net {

struct Endpoint {
  std::string host;        // a name or an address; IPv6 without brackets; empty for unix:
  std::uint16_t port = 0;  // 1..65535; 0 for unix:
  std::string path;        // the socket's path for unix:PATH; empty otherwise

  bool is_unix() const { return !path.empty(); }

  // "host:port" (the port a whole number 1..65535, the host not empty), "[v6]:port", or
  // "unix:PATH" (PATH not empty). An IPv6 address without brackets is taken too ("::1:5": the
  // port is what follows the last colon). nullopt for anything else.
  static std::optional<Endpoint> try_parse(std::string_view text);
  // The same, throwing Error(bad_args) that quotes text and says what was expected and why it
  // is not that.
  static Endpoint parse(std::string_view text);
  // A host (a name, an address, "[v6]", or "unix:PATH") and a port, as Client::connect takes
  // them. Throws Error(bad_args) when they do not make an endpoint.
  static Endpoint from(std::string_view host, std::uint16_t port);

  // "host:port", "[v6]:port" (any host with a colon is bracketed) or "unix:PATH": what
  // try_parse reads back to an equal endpoint.
  std::string text() const;
  // The host as a URL or an address list writes it: IPv6 in brackets.
  std::string host_text() const;

  bool operator==(const Endpoint& o) const { return host == o.host && port == o.port && path == o.path; }
  bool operator!=(const Endpoint& o) const { return !(*this == o); }
};

// The host part of a peer's text ("1.2.3.4:5678" -> "1.2.3.4", "[::1]:5" -> "[::1]"); the
// text itself when it is not host:port (a login throttle counts failures per address).
std::string address_part(std::string_view peer);

}  // namespace agentd::net
