#include "console/console_api.h"

#include "agent_call.h"
#include "console/assets.h"
#include "console/console_json.h"
#include "openai/chat_mapping.h"

#include "options.h"

#include <agentd/trace_export.h>

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <utility>

namespace gateway::console {

namespace {

// The trace id of the console's own reads of an agent (its memory, for the one-agent view): the
// server records them as calls of kind memory, which the console's call lists leave out, so
// watching an agent does not fill its calls or the timeline.
constexpr const char* kConsoleReadTrace = "agentd-console-read";
constexpr std::chrono::seconds kMemoryReadTimeout{5};

using ExchangePtr = std::shared_ptr<http::Exchange>;
using http::Status;
using http::bhttp::verb;

constexpr const char* kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

void fail(const ExchangePtr& ex, Status status, const std::string& message, const std::string& code,
          const std::string& param = {}) {
  auto e = openai::invalid_request(status, message, code, param);
  ex->respond_json(e.status, e.body);
}

void fail(const ExchangePtr& ex, const agentd::Error& e) {
  auto a = upstream_error(e);
  ex->respond_json(a.status, a.body);
}

// fn, for Upstream::run_blocking: what it throws besides what it answers itself is answered as
// a 500 instead of escaping from the blocking thread.
template <typename Fn>
auto answering_failures(ExchangePtr ex, Fn fn) {
  return [ex = std::move(ex), fn = std::move(fn)](Backend* b, const agentd::Error* not_connected) mutable {
    try {
      fn(b, not_connected);
    } catch (const std::exception& failure) {
      fail(ex, agentd::Error(agentd::ErrorCode::internal, failure.what()));
    }
  };
}

void bad_param(const ExchangePtr& ex, const std::string& param, const std::string& message) {
  fail(ex, Status::bad_request, "'" + param + "' " + message, "invalid_parameter", param);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded (and '+' as a space in a query); nullopt for a broken escape.
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hex_digit(s[i + 1]), lo = hex_digit(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

// The query string's parameters (a repeated one: the last). nullopt: a broken %-escape.
std::optional<std::map<std::string, std::string>> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    const auto amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    auto key = percent_decode(pair.substr(0, eq), true);
    auto value =
        percent_decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    if (!key || !value) return std::nullopt;
    out[*key] = *value;
  }
  return out;
}

// The parameters of one request, each checked; the first bad one is answered 400 naming it.
class Params {
 public:
  Params(ExchangePtr ex, std::map<std::string, std::string> values)
      : ex_(std::move(ex)), values_(std::move(values)) {}
  bool ok() const { return ok_; }
  std::string text(const std::string& name, std::size_t max_bytes = 512) {
    auto it = values_.find(name);
    if (!ok_ || it == values_.end()) return {};
    if (it->second.size() > max_bytes) refuse(name, "is longer than " + std::to_string(max_bytes) + " bytes");
    return it->second;
  }
  // A whole number in [lo, hi]; def when absent.
  std::uint64_t number(const std::string& name, std::uint64_t lo, std::uint64_t hi, std::uint64_t def) {
    auto it = values_.find(name);
    if (!ok_ || it == values_.end()) return def;
    const std::string& s = it->second;
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
      refuse(name, "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v;
  }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // One of choices (the first when absent).
  std::string choice(const std::string& name, const std::vector<std::string>& choices) {
    auto it = values_.find(name);
    if (!ok_ || it == values_.end()) return choices.front();
    if (std::find(choices.begin(), choices.end(), it->second) == choices.end()) {
      std::string list;
      for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      refuse(name, "must be one of: " + list);
    }
    return it->second;
  }
  void refuse(const std::string& name, const std::string& message) {
    if (!ok_) return;
    ok_ = false;
    bad_param(ex_, name, message);
  }

 private:
  ExchangePtr ex_;
  std::map<std::string, std::string> values_;
  bool ok_ = true;
};

const std::vector<std::string> kSorts = {"id",     "name",   "class",     "calls",
                                         "errors", "queued", "last_call", "tokens"};

agentd::AgentQuery::Sort sort_of(const std::string& s) {
  using S = agentd::AgentQuery::Sort;
  if (s == "name") return S::name;
  if (s == "class") return S::class_name;
  if (s == "calls") return S::calls;
  if (s == "errors") return S::errors;
  if (s == "queued") return S::queued;
  if (s == "last_call") return S::last_call;
  if (s == "tokens") return S::tokens;
  return S::id;
}

template <typename T>
int three_way(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// The order the servers sort in (AgentQuery, AgentHost::query), to merge a cluster's pages.
bool sorts_before(const agentd::AgentInfo& a, const agentd::AgentInfo& b, agentd::AgentQuery::Sort sort,
                  bool descending) {
  using S = agentd::AgentQuery::Sort;
  int c = 0;
  switch (sort) {
    case S::id:
      break;
    case S::name:
      c = three_way(a.name, b.name);
      break;
    case S::class_name:
      c = three_way(a.class_name, b.class_name);
      break;
    case S::calls:
      c = three_way(a.completed_calls + a.failed_calls, b.completed_calls + b.failed_calls);
      break;
    case S::errors:
      c = three_way(a.failed_calls, b.failed_calls);
      break;
    case S::queued:
      c = three_way(a.queued_calls, b.queued_calls);
      break;
    case S::last_call:
      c = three_way(a.last_call_unix_ms, b.last_call_unix_ms);
      break;
    case S::tokens:
      c = three_way(a.prompt_tokens + a.completion_tokens, b.prompt_tokens + b.completion_tokens);
      break;
  }
  if (c != 0) return descending ? c > 0 : c < 0;
  // Ties by id ascending whatever the direction, as AgentHost::query orders them: the merge must
  // order each member's rows as the member did, or pages repeat and skip agents.
  const int by_id = three_way(a.id, b.id);
  return sort == S::id && descending ? by_id > 0 : by_id < 0;
}

// The most a cluster's members are each asked for (offset + limit): merging deeper pages would
// move too many agents.
constexpr std::uint64_t kClusterDepth = 10000;

struct Located {
  agentd::TraceSpan span;
  std::string server;
};

// The host part of a Host header ("name:port", "[v6]:port", "name").
std::string_view host_of(std::string_view host) {
  if (host.starts_with('[')) {
    const auto end = host.find(']');
    return end == std::string_view::npos ? host : host.substr(1, end - 1);
  }
  const auto colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}

bool is_ip_literal(std::string_view host) {
  const std::string h(host);
  unsigned char buf[16];
  return ::inet_pton(AF_INET, h.c_str(), buf) == 1 || ::inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

}  // namespace

// Why a request to /console/api/ from a browser must be refused, or empty. A page of another
// site must neither read the console's data nor make it send a message: refused when the
// browser says the request is cross-site (Sec-Fetch-Site) or names another origin (Origin). A
// gateway without tokens also refuses a Host it does not know (not loopback, not an IP address,
// not --listen's host): a DNS name rebound to this machine by an attacker's page.
std::string ConsoleApi::cross_site_refusal(const http::Request& req) const {
  const std::string_view host = req[http::bhttp::field::host];
  const std::string_view fetch_site = req["Sec-Fetch-Site"];
  if (fetch_site == "cross-site" || fetch_site == "same-site")
    return "a request from another site's page (Sec-Fetch-Site: " + std::string(fetch_site) +
           "): the console's API answers its own page only";
  const std::string_view origin = req[http::bhttp::field::origin];
  if (!origin.empty()) {
    const auto scheme = origin.find("://");
    if (scheme == std::string_view::npos || origin.substr(scheme + 3) != host)
      return "a request from the page of another origin (Origin: " + std::string(origin) +
             "): the console's API answers its own page only";
  }
  if (!tokens_.enabled()) {
    const std::string_view name = host_of(host);
    if (!name.empty() && !is_loopback(std::string(name)) && !is_ip_literal(name) &&
        name != settings_.listen_host)
      return "Host '" + std::string(host) +
             "' is not this gateway's address: without --token-file the console answers only "
             "requests for localhost, an IP address or --listen's host (a guard against DNS rebinding); "
             "use that address, or give the gateway a token";
  }
  return {};
}

bool ConsoleApi::handle(const ExchangePtr& ex) {
  const auto& req = ex->request();
  const std::string_view target = req.target();
  const auto qmark = target.find('?');
  const std::string_view path = target.substr(0, qmark);
  const std::string_view query =
      qmark == std::string_view::npos ? std::string_view() : target.substr(qmark + 1);
  if (path != "/console" && !path.starts_with("/console/")) return false;
  ex->add_header("Content-Security-Policy", kCsp);
  ex->add_header("X-Content-Type-Options", "nosniff");
  ex->add_header("Referrer-Policy", "no-referrer");
  if (path.starts_with("/console/api/")) {
    if (const std::string why = cross_site_refusal(req); !why.empty()) {
      fail(ex, Status::forbidden, why, "cross_site_request");
      return true;
    }
    if (tokens_.enabled() && !tokens_.accepts(req[http::bhttp::field::authorization])) {
      fail(ex, Status::unauthorized, "missing or wrong bearer token (Authorization: Bearer TOKEN)",
           "invalid_api_key");
      return true;
    }
    api(ex, path.substr(std::string_view("/console/api/").size()), query);
    return true;
  }
  if (req.method() != verb::get) {
    fail(ex, Status::method_not_allowed, "use GET " + std::string(path), "method_not_allowed");
    return true;
  }
  if (path == "/console" || path == "/console/") {
    asset(ex, "index.html");
  } else if (path.starts_with("/console/assets/")) {
    asset(ex, path.substr(std::string_view("/console/assets/").size()));
  } else {
    fail(ex, Status::not_found, "no such console page: " + std::string(path), "not_found");
  }
  return true;
}

void ConsoleApi::asset(const ExchangePtr& ex, std::string_view name) {
  const Asset* a = find_asset(name);
  if (!a) return fail(ex, Status::not_found, "no such console asset: " + std::string(name), "not_found");
  ex->add_header("Cache-Control", "no-cache");
  ex->add_header("ETag", a->etag);
  const auto match = ex->request()[http::bhttp::field::if_none_match];
  if (!match.empty() && match.find(a->etag) != std::string_view::npos)
    return ex->respond(Status::not_modified, a->content_type, {});
  ex->respond(Status::ok, a->content_type, std::string(reinterpret_cast<const char*>(a->data), a->size));
}

void ConsoleApi::api(const ExchangePtr& ex, std::string_view path, std::string_view query) {
  const verb method = ex->request().method();
  // agents/ID and agents/ID/send
  if (path.starts_with("agents/")) {
    std::string_view rest = path.substr(std::string_view("agents/").size());
    bool send_path = false;
    if (rest.ends_with("/send")) {
      rest.remove_suffix(std::string_view("/send").size());
      send_path = true;
    }
    auto id = rest.find('/') == std::string_view::npos ? percent_decode(rest, false) : std::nullopt;
    if (!id || id->empty())
      return fail(ex, Status::not_found, "no such endpoint: /console/api/" + std::string(path), "not_found");
    if (send_path) {
      if (method != verb::post)
        return fail(ex, Status::method_not_allowed, "use POST /console/api/agents/ID/send",
                    "method_not_allowed");
      return send(ex, std::move(*id));
    }
    if (method != verb::get)
      return fail(ex, Status::method_not_allowed, "use GET /console/api/agents/ID", "method_not_allowed");
    return agent(ex, std::move(*id), query);
  }
  static const std::vector<std::string_view> kGets = {"overview", "agents",  "calls", "trace.json",
                                                      "models",   "history", "events"};
  if (std::find(kGets.begin(), kGets.end(), path) == kGets.end())
    return fail(ex, Status::not_found, "no such endpoint: /console/api/" + std::string(path), "not_found");
  if (method != verb::get)
    return fail(ex, Status::method_not_allowed, "use GET /console/api/" + std::string(path),
                "method_not_allowed");
  if (path == "overview")
    return sampler_.with_latest(
        [ex](std::shared_ptr<const Reading> r) { ex->respond_json(Status::ok, r->overview); });
  if (path == "models")
    return sampler_.with_latest([ex](std::shared_ptr<const Reading> r) {
      ex->respond_json(Status::ok, dump(models_json(r->servers)));
    });
  if (path == "history") return ex->respond_json(Status::ok, sampler_.history());
  if (path == "events") return events(ex);
  if (path == "agents") return agents(ex, query);
  calls(ex, query, path == "trace.json");
}

void ConsoleApi::agents(const ExchangePtr& ex, std::string_view query) {
  auto values = parse_query(query);
  if (!values)
    return fail(ex, Status::bad_request, "the query string has a broken %-escape", "invalid_parameter");
  Params p(ex, std::move(*values));
  agentd::AgentQuery q;
  q.offset = p.number("offset", 0, 1'000'000'000'000ULL, 0);
  q.limit = static_cast<std::uint32_t>(p.number("limit", 1, 1000, 100));
  q.search = p.text("q");
  q.class_name = p.text("class");
  q.sort = sort_of(p.choice("sort", kSorts));
  q.descending = p.choice("order", {"asc", "desc"}) == "desc";
  const bool server_given = p.has("server");
  std::string server = p.text("server");
  if (!p.ok()) return;
  upstream_.run_blocking(
      answering_failures(ex, [ex, q, server, server_given](Backend* b, const agentd::Error* not_connected) {
        if (!b) return fail(ex, *not_connected);
        const std::size_t n = b->server_count();
        std::vector<std::size_t> members;
        std::vector<std::string> addresses;
        for (std::size_t i = 0; i < n; ++i) {
          addresses.push_back(b->server_address(i));
          if (!server_given || addresses.back() == server) members.push_back(i);
        }
        if (server_given && members.empty()) {
          std::string list;
          for (const auto& a : addresses) list += (list.empty() ? "" : ", ") + a;
          return bad_param(ex, "server", "names no server of this gateway (its servers: " + list + ")");
        }
        nlohmann::json rows = nlohmann::json::array();
        std::uint64_t total = 0, matched = 0;
        nlohmann::json down = nlohmann::json::array();  // members whose agents are left out
        if (members.size() == 1) {
          try {
            auto page = b->server(members[0])->query_agents(q);
            for (const auto& a : page.agents) rows.push_back(agent_row(a, addresses[members[0]]));
            total = page.total;
            matched = page.matched;
          } catch (const agentd::Error& e) {
            return fail(ex, e);
          }
        } else {
          if (q.offset + q.limit > kClusterDepth)
            return bad_param(
                ex, "offset",
                "plus limit must be at most " + std::to_string(kClusterDepth) +
                    " across a cluster: narrow the list (q, class) or pick one server (server=ADDRESS)");
          const std::uint64_t want = q.offset + q.limit;
          std::vector<std::pair<agentd::AgentInfo, std::size_t>> all;
          std::optional<agentd::Error> failed;
          std::size_t up = 0;
          for (std::size_t i : members) {
            try {
              agentd::AgentQuery mq = q;
              mq.offset = 0;
              std::uint64_t got = 0;
              while (got < want) {
                mq.limit = static_cast<std::uint32_t>(std::min<std::uint64_t>(1000, want - got));
                auto page = b->server(i)->query_agents(mq);
                if (mq.offset == 0) {
                  total += page.total;
                  matched += page.matched;
                }
                for (auto& a : page.agents) all.emplace_back(std::move(a), i);
                got += page.agents.size();
                mq.offset += page.agents.size();
                if (page.agents.empty() || mq.offset >= page.matched) break;
              }
              ++up;
            } catch (const agentd::Error& e) {  // a member down: its agents are left out
              if (!failed) failed = e;
              down.push_back(addresses[i]);
            }
          }
          if (up == 0 && failed) return fail(ex, *failed);
          // Members may hold agents of the same id: those tie on every key, and go in member
          // order, or a page boundary between them would repeat one and skip the other.
          std::sort(all.begin(), all.end(), [&q](const auto& x, const auto& y) {
            if (sorts_before(x.first, y.first, q.sort, q.descending)) return true;
            if (sorts_before(y.first, x.first, q.sort, q.descending)) return false;
            return x.second < y.second;
          });
          for (std::uint64_t k = q.offset; k < all.size() && k < want; ++k)
            rows.push_back(agent_row(all[k].first, addresses[all[k].second]));
        }
        nlohmann::json out = {
            {"total", total},
            {"matched", matched},
            {"offset", q.offset},
            {"limit", q.limit},
            {"max_depth", members.size() > 1 ? nlohmann::json(kClusterDepth) : nlohmann::json()},
            {"servers_down", std::move(down)},
            {"agents", std::move(rows)}};
        ex->respond_json(Status::ok, dump(out));
      }));
}

void ConsoleApi::agent(const ExchangePtr& ex, std::string id, std::string_view query) {
  auto values = parse_query(query);
  if (!values)
    return fail(ex, Status::bad_request, "the query string has a broken %-escape", "invalid_parameter");
  Params p(ex, std::move(*values));
  const bool offset_given = p.has("mem_offset");
  const std::uint64_t mem_offset = p.number("mem_offset", 0, 1'000'000'000'000ULL, 0);
  const std::uint64_t mem_limit = p.number("mem_limit", 1, 1000, 50);
  if (!p.ok()) return;
  upstream_.run_blocking(answering_failures(
      ex, [ex, id, offset_given, mem_offset, mem_limit](Backend* b, const agentd::Error* not_connected) {
        if (!b) return fail(ex, *not_connected);
        try {
          agentd::AgentRef ref = b->agent(id);
          const agentd::AgentInfo info = ref.info();
          // Read in the agent's order, after the calls queued on it: a busy agent's memory waits
          // at most kMemoryReadTimeout (the view says so), not for as long as its calls run.
          std::vector<agentd::Msg> memory;
          std::string unavailable;
          try {
            memory = ref.with_trace_id(kConsoleReadTrace).with_timeout(kMemoryReadTimeout).memory();
          } catch (const agentd::Error& e) {
            if (e.code() != agentd::ErrorCode::timeout) throw;
            unavailable = e.what();
          }
          std::string server;
          const agentd::Value v = ref.to_value();
          if (v.contains("agentd_agent_ref") &&
              v["agentd_agent_ref"].value("address", nlohmann::json()).is_string())
            server = v["agentd_agent_ref"]["address"].get<std::string>();
          const std::uint64_t total = memory.size();
          const std::uint64_t from =
              offset_given ? std::min(mem_offset, total) : (total > mem_limit ? total - mem_limit : 0);
          nlohmann::json messages = nlohmann::json::array();
          for (std::uint64_t k = from; k < total && k < from + mem_limit; ++k)
            messages.push_back(message_json(memory[k]));
          // Its calls among the recent spans of the servers (newest first).
          std::vector<Located> spans;
          for (std::size_t i = 0; i < b->server_count(); ++i) {
            const std::string address = b->server_address(i);
            if (!server.empty() && b->server_count() > 1 && address != server) continue;
            try {
              for (auto& s : b->server(i)->traces())
                if (s.agent_id == id && s.trace_id != kConsoleReadTrace)
                  spans.push_back(Located{std::move(s), address});
            } catch (const agentd::Error&) {  // down: no spans from it
            }
          }
          std::sort(spans.begin(), spans.end(), [](const Located& x, const Located& y) {
            return x.span.enqueued_unix_ns > y.span.enqueued_unix_ns;
          });
          if (spans.size() > 100) spans.resize(100);
          nlohmann::json calls = nlohmann::json::array();
          for (const auto& s : spans) calls.push_back(span_json(s.span, s.server));
          nlohmann::json out = {
              {"agent", agent_row(info, server)},
              {"memory",
               {{"total", total},
                {"offset", from},
                {"limit", mem_limit},
                {"messages", std::move(messages)},
                {"unavailable", unavailable.empty() ? nlohmann::json() : nlohmann::json(unavailable)}}},
              {"calls", std::move(calls)}};
          ex->respond_json(Status::ok, dump(out));
        } catch (const agentd::Error& e) {
          fail(ex, e);
        } catch (const std::exception& e) {
          fail(ex, agentd::Error(agentd::ErrorCode::internal, e.what()));
        }
      }));
}

void ConsoleApi::send(const ExchangePtr& ex, std::string id) {
  if (!settings_.send_enabled)
    return fail(ex, Status::forbidden,
                "the console is read-only: sending messages needs the gateway started with --console-send",
                "console_read_only");
  // JSON only: a form of another site can post text/plain without asking the browser first.
  const std::string_view type = ex->request()[http::bhttp::field::content_type];
  if (!type.starts_with("application/json"))
    return fail(ex, Status::unsupported_media_type,
                "send the message as Content-Type: application/json, not '" + std::string(type) + "'",
                "invalid_request");
  const auto body = nlohmann::json::parse(ex->request().body(), nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return fail(ex, Status::bad_request, "the request body must be a JSON object {\"content\": \"text\"}",
                "invalid_request");
  if (!body.contains("content") || !body["content"].is_string())
    return bad_param(ex, "content", "is required: the message's text (a string)");
  agentd::Msg input("user", body["content"].get<std::string>(), "user");
  upstream_.with_agent(id, [this, ex, input = std::move(input)](AgentOrError found) {
    if (auto* e = std::get_if<agentd::Error>(&found)) return fail(ex, *e);
    const auto& agent = std::get<agentd::AgentRef>(found);
    std::optional<agentd::Placeholder> p;
    try {
      p.emplace(agent.with_trace_id(ex->trace_id()).reply_stream(input));
    } catch (const agentd::Error& e) {  // the client is closed: the call could not be sent
      return fail(ex, e);
    }
    ex->add_header("Cache-Control", "no-cache");
    ex->start_stream(Status::ok, "text/event-stream");
    await_stream(
        upstream_, ex->executor(), agent.id(), *p, settings_.reply_timeout,
        [ex](std::string text) {
          ex->send("event: chunk\ndata: " + dump({{"text", std::move(text)}}) + "\n\n");
        },
        [ex](Outcome outcome) {
          if (auto* e = std::get_if<agentd::Error>(&outcome)) {
            ex->send("event: error\ndata: " +
                     dump({{"code", std::string(agentd::to_string(e->code()))}, {"message", e->what()}}) +
                     "\n\n");
          } else {
            const auto& m = std::get<agentd::Msg>(outcome);
            nlohmann::json done = {{"message", {{"name", m.name}, {"role", m.role}, {"content", m.text()}}},
                                   {"usage",
                                    {{"model_calls", outcome.usage.model_calls},
                                     {"prompt_tokens", outcome.usage.prompt_tokens},
                                     {"completion_tokens", outcome.usage.completion_tokens}}},
                                   {"trace_id", ex->trace_id()}};
            ex->send("event: done\ndata: " + dump(done) + "\n\n");
          }
          ex->end_stream();
        });
  });
}

void ConsoleApi::calls(const ExchangePtr& ex, std::string_view query, bool chrome) {
  auto values = parse_query(query);
  if (!values)
    return fail(ex, Status::bad_request, "the query string has a broken %-escape", "invalid_parameter");
  Params p(ex, std::move(*values));
  const std::string agent = p.text("agent");
  const std::string trace = p.text("trace");
  const std::uint64_t limit = p.number("limit", 1, 10000, chrome ? 10000 : 500);
  if (!p.ok()) return;
  upstream_.run_blocking(answering_failures(
      ex, [ex, agent, trace, limit, chrome](Backend* b, const agentd::Error* not_connected) {
        if (!b) return fail(ex, *not_connected);
        std::vector<Located> spans;
        std::optional<agentd::Error> failed;
        std::size_t up = 0;
        for (std::size_t i = 0; i < b->server_count(); ++i) {
          const std::string address = b->server_address(i);
          try {
            for (auto& s : b->server(i)->traces())
              if ((agent.empty() || s.agent_id == agent) && (trace.empty() || s.trace_id == trace) &&
                  s.trace_id != kConsoleReadTrace)
                spans.push_back(Located{std::move(s), address});
            ++up;
          } catch (const agentd::Error& e) {  // down: no spans from it
            if (!failed) failed = e;
          }
        }
        if (up == 0 && failed) return fail(ex, *failed);
        std::stable_sort(spans.begin(), spans.end(), [](const Located& x, const Located& y) {
          return x.span.enqueued_unix_ns < y.span.enqueued_unix_ns;
        });
        if (spans.size() > limit)
          spans.erase(spans.begin(), spans.end() - static_cast<std::ptrdiff_t>(limit));
        if (chrome) {
          std::vector<agentd::ServerSpans> servers;
          for (auto& s : spans) {
            auto it = std::find_if(servers.begin(), servers.end(),
                                   [&s](const agentd::ServerSpans& x) { return x.server == s.server; });
            if (it == servers.end()) it = servers.insert(servers.end(), agentd::ServerSpans{s.server, {}});
            it->spans.push_back(std::move(s.span));
          }
          ex->add_header("Content-Disposition", "attachment; filename=\"agentd-trace.json\"");
          return ex->respond_json(Status::ok, agentd::to_chrome_trace(servers));
        }
        nlohmann::json list = nlohmann::json::array();
        for (const auto& s : spans) list.push_back(span_json(s.span, s.server));
        ex->respond_json(Status::ok, dump({{"spans", std::move(list)}}));
      }));
}

void ConsoleApi::events(const ExchangePtr& ex) {
  ex->add_header("Cache-Control", "no-cache");
  ex->start_stream(Status::ok, "text/event-stream");
  ex->send(": agentd console events: one tick a second\n\n");
  sampler_.add_viewer(ex);
}

}  // namespace gateway::console
