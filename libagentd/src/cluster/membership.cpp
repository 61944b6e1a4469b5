#include "membership.h"

#include "endpoint.h"
#include "tokens.h"

#include <agentd/error.h>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace agentd::cluster {

namespace {

constexpr std::string_view kDns = "dns:";

// The endpoint spec names ("host:port", or "dns:NAME:PORT" for NAME's addresses); nullopt
// when it names none (unix: endpoints are not cluster members).
std::optional<net::Endpoint> endpoint_of(std::string_view spec) {
  if (spec.substr(0, kDns.size()) == kDns) spec.remove_prefix(kDns.size());
  auto e = net::Endpoint::try_parse(spec);
  if (!e || e->is_unix()) return std::nullopt;
  return e;
}

bool parses(const std::string& spec) { return endpoint_of(spec).has_value(); }

// Every address name resolves to, for port: IPv4 first, each sorted, no duplicates.
std::vector<Address> resolve_name(const std::string& spec, const std::string& name, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc != 0)
    throw Error(ErrorCode::bad_args,
                fmt::format("cluster member {}: {} does not resolve ({}); check the name, or list "
                            "the servers' addresses instead",
                            spec, name, gai_strerror(rc)));
  std::set<std::string> v4, v6;
  for (auto* a = found; a; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof text);
      v4.insert(text);
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, text, sizeof text);
      v6.insert(text);
    }
  }
  freeaddrinfo(found);
  std::vector<Address> out;
  for (const auto& h : v4) out.push_back({net::Endpoint{h, port, {}}, spec});
  for (const auto& h : v6) out.push_back({net::Endpoint{h, port, {}}, spec});
  return out;
}

std::string absolute_from(const std::filesystem::path& dir, const std::string& p) {
  if (p.empty()) return p;
  std::filesystem::path path(p);
  return path.is_absolute() ? p : (dir / path).lexically_normal().string();
}

}  // namespace

std::optional<Placement> placement_from_name(const std::string& name) {
  if (name == "round_robin") return Placement::round_robin;
  if (name == "least_loaded") return Placement::least_loaded;
  return std::nullopt;
}

std::optional<std::vector<std::string>> split_spec_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    std::string piece = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!parses(piece)) return std::nullopt;
    out.push_back(piece);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<Address> resolve(const std::vector<std::string>& specs) {
  std::vector<Address> out;
  std::set<std::string> seen;
  for (const auto& spec : specs) {
    bool dns = spec.rfind(kDns, 0) == 0;
    auto endpoint = endpoint_of(spec);
    if (!endpoint)
      throw Error(ErrorCode::bad_args,
                  fmt::format("cluster member \"{}\": expected HOST:PORT or dns:NAME:PORT", spec));
    std::vector<Address> these;
    if (dns)
      these = resolve_name(spec, endpoint->host, endpoint->port);
    else
      these.push_back({*endpoint, spec});
    for (auto& a : these)
      if (seen.insert(a.text()).second) out.push_back(std::move(a));
  }
  return out;
}

ClusterFile read_cluster_file(const std::string& path) {
  auto fail = [&](const std::string& what) {
    return Error(ErrorCode::config_error, fmt::format("cluster file {}: {}", path, what));
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw fail("no such file (give a cluster file, dns:NAME:PORT or HOST:PORT,...)");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw fail(fmt::format("not valid YAML: {}", e.what()));
  }
  if (!root.IsMap()) throw fail("expected a mapping with a servers: list");
  auto dir = std::filesystem::absolute(path, ec).parent_path();
  ClusterFile out;
  static const std::set<std::string> kKeys = {"servers",  "token_file", "tls_ca",
                                              "tls_cert", "tls_key",    "placement"};
  for (const auto& kv : root) {
    auto key = kv.first.as<std::string>();
    if (!kKeys.count(key))
      throw fail(
          fmt::format("unknown key \"{}\" (known: servers, token_file, tls_ca, tls_cert, "
                      "tls_key, placement)",
                      key));
  }
  auto servers = root["servers"];
  if (!servers || !servers.IsSequence() || servers.size() == 0)
    throw fail("servers: must be a list of at least one server");
  for (std::size_t i = 0; i < servers.size(); ++i) {
    auto s = servers[i];
    auto where = fmt::format("servers[{}]", i);
    std::string spec;
    try {
      if (s.IsScalar()) {
        spec = s.as<std::string>();
      } else if (s.IsMap() && s["dns"]) {
        spec = std::string(kDns) + s["dns"].as<std::string>();
      } else if (s.IsMap() && s["host"] && s["port"]) {
        spec = fmt::format("{}:{}", s["host"].as<std::string>(), s["port"].as<int>());
      } else {
        throw fail(where + ": expected HOST:PORT, {host: H, port: P} or {dns: NAME:PORT}");
      }
    } catch (const YAML::Exception& e) {
      throw fail(fmt::format("{}: {}", where, e.what()));
    }
    if (!parses(spec)) throw fail(fmt::format("{}: \"{}\" is not HOST:PORT (or dns:NAME:PORT)", where, spec));
    out.servers.push_back(spec);
  }
  auto text = [&](const char* key) {
    auto n = root[key];
    if (!n) return std::string();
    if (!n.IsScalar()) throw fail(fmt::format("{}: expected a path", key));
    return absolute_from(dir, n.as<std::string>());
  };
  out.tls_ca = text("tls_ca");
  out.tls_cert = text("tls_cert");
  out.tls_key = text("tls_key");
  // The first token of the file (the format of as_server --auth-token-file, private to its owner).
  if (auto token_file = text("token_file"); !token_file.empty())
    out.token = detail::read_token_file(token_file, fmt::format("cluster file {}: token_file", path)).front();
  if (auto p = root["placement"]) {
    auto name = p.IsScalar() ? p.as<std::string>() : std::string();
    out.placement = placement_from_name(name);
    if (!out.placement) throw fail(fmt::format("placement: \"{}\" is not round_robin or least_loaded", name));
  }
  return out;
}

}  // namespace agentd::cluster
