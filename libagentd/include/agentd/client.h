// agentd::Client: how a main program reaches agents, in one of three modes that share one API:
//   Client::connect(host, port)  independent mode: a server started beforehand (or by systemd)
//   Client::spawn_child({...})    child mode: this process starts its own as_server and owns it
//   Client::local({...})          local mode: agents run in this process, no sockets
// Switching modes changes that one line.
//
// Thread-safety: Client, AgentRef and Placeholder may be used from any thread. AgentRef and
// Placeholder are cheap to copy, and copies share state; a Client is move-only (it owns the
// connection, or the child server, or the in-process one).
#pragma once

#include <agentd/agent.h>
#include <agentd/error.h>
#include <agentd/model.h>
#include <agentd/msg.h>
#include <agentd/tool.h>
#include <agentd/value.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentd {

namespace detail {
class ClientCore;
struct PlaceholderState;

// What `co_await placeholder` returns (see Placeholder::operator co_await).
struct PlaceholderAwaiter {
  std::shared_ptr<PlaceholderState> state;
  std::uint64_t watch = 0;
  AliveFlag flag;
  PlaceholderAwaiter(std::shared_ptr<PlaceholderState> s) : state(std::move(s)) {}
  ~PlaceholderAwaiter();
  bool await_ready();
  bool await_suspend(std::coroutine_handle<> h);
  Msg await_resume();
};
}  // namespace detail

// Whether a client's replies may take synchronous lanes (ClientOptions::lanes).
enum class LaneUse { automatic, on, off };

struct ClientOptions {
  // Deadline for each synchronous operation and for Placeholder::get() without an argument.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(10);
  // The token to log in with (as_server --auth-token-file). Empty: $AGENTD_TOKEN, else none
  // (enough for a server without tokens). A refused token throws Error(unauthenticated).
  std::string token{};
  // TLS, for servers started with --tls-cert: the CA bundle (PEM file) that signed the server's
  // certificate. Empty: plaintext. The certificate must name the host connected to.
  std::string tls_ca{};
  // A client certificate and its key (PEM files), for servers that require one (--tls-client-ca).
  std::string tls_cert{};
  std::string tls_key{};
  // The largest call one message may carry (bytes; Cap'n Proto's limit, 64 MiB, is the most): a
  // call whose input is bigger fails at once with too_large and is not sent. A server started
  // with a smaller --max-message-bytes refuses bigger calls itself (too_large, the call alone).
  std::size_t max_message_bytes = std::size_t{64} << 20;
  // A call or creation the server refuses as overloaded (--max-agents, --max-queued-calls,
  // --max-queued-calls-per-agent) is sent again after a backoff that starts here and doubles
  // up to overload_retry_max (with jitter), until `timeout` after it was first sent; then it
  // fails with the server's overloaded error. Calls to one agent keep their order across
  // retries. overload_retry_initial 0: no retries (overloaded fails the call at once).
  std::chrono::milliseconds overload_retry_initial = std::chrono::milliseconds(20);
  std::chrono::milliseconds overload_retry_max = std::chrono::seconds(2);
  // A creation refused as overloaded means the server is full (--max-agents), which only a
  // deletion changes: it is retried for at most this long (and never past `timeout`), then
  // fails with the server's error. 0: fails at once. The first refusal of a series of retries
  // is logged once at warn, naming the server's limit.
  std::chrono::milliseconds agent_limit_retry = std::chrono::seconds(2);
  // Independent mode (TCP, unix: and TLS alike): a client that loses its connection connects
  // again, logging in with the same token, after a backoff that starts at reconnect_initial and
  // doubles up to reconnect_max (with jitter), until reconnect_deadline after the loss. Calls
  // made meanwhile wait and are sent once connected; a reply / call_async sent before the loss
  // is looked up by call id on the server (its result, or not_applied when the server does not
  // know it: safe to retry); other calls sent before the loss fail with disconnected. Past the
  // deadline every waiting call fails with disconnected and the client stays disconnected.
  // reconnect_deadline 0: never reconnect (every call fails with disconnected at once).
  // Child mode never reconnects (nothing restarts the child); local mode has no connection.
  std::chrono::milliseconds reconnect_initial = std::chrono::milliseconds(100);
  std::chrono::milliseconds reconnect_max = std::chrono::seconds(5);
  std::chrono::milliseconds reconnect_deadline = std::chrono::seconds(60);
  // For a program that uses the client from one thread: the thread that makes the client runs
  // its connection itself, while it waits (Placeholder::get(), next_chunk(), a synchronous call)
  // and when it issues a call, instead of a loop thread of the client's doing it and handing
  // every call and answer over. A synchronous call then costs two thread wake-ups fewer. The
  // connection makes progress only then: answers wait in the socket while the program computes,
  // and a lost connection is noticed (and reconnected) at the next wait. Use the client, its
  // AgentRefs and its Placeholders from that thread only (a wait on another thread fails with
  // bad_request), and close or destroy it there. Client::connect and spawn_child; not
  // Client::local.
  bool single_thread = false;
  // Synchronous lanes (README "The synchronous lane"): a reply(msg) whose get() follows at once
  // on the same thread travels on that thread's own connection, read and written by the thread
  // itself, and the server runs a blocking agent's call on the thread that reads it: no thread
  // hand-off in either process. Any other use of the placeholder, any other call from the
  // thread, or a millisecond without get() sends it on the usual connection instead, so calls
  // still run side by side and in order. A server that serves no lanes (--lane-threads 0) or
  // has none free is simply not asked again for a few seconds.
  //  - automatic (the default): lanes where they can be used: plaintext TCP and Unix sockets,
  //    Client::connect and spawn_child, not with single_thread.
  //  - on: the same, and bad_args where they cannot be used (tls_ca, single_thread, local).
  //  - off: every call on the RPC connection.
  LaneUse lanes = LaneUse::automatic;
  // How long a lane call polls its socket for the answer before the thread sleeps in read()
  // (0: it sleeps at once). An answer that comes while it polls spares the thread a wake-up: on
  // the 2-core VM a third of a short call's round trip (README "Polling for the answer"). The
  // CPU it costs is bounded by this per call, and is spent only while answers keep coming within
  // it: a lane whose previous answer took longer sleeps at once. At most as many threads of a
  // process poll at once as it has CPUs less one (none on one CPU). At most kMaxLaneSpin (more is
  // bad_args).
  std::chrono::microseconds lane_spin = std::chrono::microseconds(100);
  static constexpr std::chrono::microseconds kMaxLaneSpin{10'000};
};

struct ChildOptions {
  // --plugin for the child: a path, or a bare name ("libweb_agent.so") looked for in the current
  // directory, plugin_dirs, then the plugins shipped beside libagentd.
  std::vector<std::string> plugins{};
  std::vector<std::string> plugin_dirs{};  // --plugin-dir for the child
  // --agent-dir for the child: folders of agent classes written in Python (README "Writing an
  // agent in Python").
  std::vector<std::string> agent_dirs{};
  std::string model_config_path{};
  // The as_server binary. Empty: $AGENTD_AS_SERVER, then the bin/ beside the loaded libagentd
  // (a build tree, or the installed tree wherever it is), then next to this program, then $PATH.
  std::string server_path{};
  // More as_server options, e.g. {"--max-workers", "64"}; the child logs at --log-level warn
  // unless these set it.
  std::vector<std::string> extra_args{};
  std::chrono::milliseconds start_timeout = std::chrono::seconds(30);
  ClientOptions client{};
};

struct LocalOptions {
  std::vector<std::string> plugins{};  // paths or bare names, as ChildOptions::plugins
  std::vector<std::string> plugin_dirs{};
  std::string model_config_path{};
  // Agent classes compiled into this program (AGENTD_REGISTER_AGENT in it) are available too.
  std::vector<AgentClass> classes = this_module_agent_classes();
  std::size_t max_workers = 1024;
  ClientOptions client{};
};

struct AgentInfo {
  std::string id;
  std::string name;
  std::string class_name;
  std::uint32_t queued_calls = 0;
  // Its calls that finished (reads of its memory not counted), and when the last one did.
  std::uint64_t completed_calls = 0;
  std::uint64_t failed_calls = 0;
  std::int64_t last_call_unix_ms = 0;  // when its last call finished (0: none since the server started)
  // Its model use since the server started (or since it was made).
  std::uint64_t model_calls = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
};

// A page of a server's agents, filtered, sorted and cut by the server (Client::query_agents):
// what a console shows of a server with a million agents without moving them all.
struct AgentQuery {
  enum class Sort { id, name, class_name, calls, errors, queued, last_call, tokens };
  std::string search;      // ASCII case-insensitive substring of the id, name or class; empty: all
                           // (over 1024 bytes: matches nothing)
  std::string class_name;  // exactly this class; empty: any
  Sort sort = Sort::id;    // calls: completed + failed; tokens: prompt + completion; ties by id
  bool descending = false;
  std::uint64_t offset = 0;
  std::uint32_t limit = 100;  // the server answers at most 1000
};

struct AgentPage {
  std::vector<AgentInfo> agents;
  std::uint64_t matched = 0;  // agents the filter matched
  std::uint64_t total = 0;    // agents on the server
};

// Durations observed: counts[i] of them were <= bounds[i] (and > bounds[i - 1]); not
// cumulative. count is all of them, those over the last bound included; sum is in seconds.
struct Histogram {
  std::vector<double> bounds;  // seconds, ascending
  std::vector<std::uint64_t> counts;
  std::uint64_t count = 0;
  double sum = 0;

  // The q-quantile (0 < q < 1) estimated from the buckets (linear within one; the last bound
  // for observations past it); std::nullopt without observations.
  std::optional<double> quantile(double q) const;
};

// One model config of a server, counted since the server started (across reloads).
struct ModelStats {
  std::string config_name;
  std::string model_type;
  std::string model_name;
  std::uint64_t calls = 0;  // failed ones included
  std::uint64_t errors = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  Histogram latency;
};

struct ServerInfo {
  std::string server_id;
  std::string version;
  std::int64_t pid = 0;
  double uptime_seconds = 0;
  std::uint64_t rss_bytes = 0;
  double cpu_seconds = 0;
  std::uint64_t agent_count = 0;
  std::uint64_t pool_size = 0;
  std::string advertise_address;
  std::vector<std::string> classes;
  std::vector<std::string> model_configs;
  std::uint32_t workers = 0;
  std::uint64_t calls_completed = 0;
  std::uint64_t calls_failed = 0;
  std::uint64_t calls_queued = 0;
  std::uint64_t max_pool_size = 0;
  double max_expire_seconds = 0;
  std::uint64_t bytes_client_in = 0;
  std::uint64_t bytes_client_out = 0;
  std::uint64_t bytes_peer_in = 0;
  std::uint64_t bytes_peer_out = 0;
  std::uint64_t model_config_version = 0;  // bumped by every model config reload
  std::uint64_t model_calls = 0;           // all agents' model calls since start (failed included)
  std::uint64_t model_errors = 0;
  std::int64_t model_prompt_tokens = 0;
  std::int64_t model_completion_tokens = 0;
  // as_server --state-dir (empty: agents live in memory only), the database's size on disk, the
  // last commit since the server started (Unix ms; 0: none yet), and why the store stopped
  // saving (then calls fail not_applied until the server is restarted).
  std::string state_dir;
  std::uint64_t state_bytes = 0;
  std::int64_t state_last_commit_unix_ms = 0;
  std::string state_error;
  // Worker threads in an agent call (running, or blocked in agent code) and their most
  // (--max-workers): when all are busy, further blocking calls wait. Calls in progress past
  // --slow-call-warn now and ever, and calls failed at their deadline (--call-timeout).
  std::uint32_t workers_busy = 0;
  std::uint32_t workers_max = 0;
  std::uint64_t calls_slow = 0;
  std::uint64_t calls_slow_total = 0;
  std::uint64_t calls_timed_out = 0;
  bool auth_required = false;  // it wants a token (--auth-token-file)
  bool tls = false;            // its TCP listener speaks TLS (--tls-cert)
  std::uint64_t calls_running = 0;
  Histogram call_latency;          // run times of finished agent calls
  std::vector<ModelStats> models;  // each model config, sorted by name
  // Synchronous lanes (ClientOptions::lanes): open now, the most (--lane-threads; 0: off), and
  // the calls answered on them since start.
  std::uint32_t lanes_open = 0;
  std::uint32_t lane_threads = 0;
  std::uint64_t lane_calls = 0;
};

// The trace span of one finished agent call (Client::traces, `agentctl trace`).
struct TraceSpan {
  std::uint64_t seq = 0;  // 1, 2, ... in the order calls finished on that server
  std::string call_id;    // empty for observe / method / memory calls
  std::string agent_id;
  std::string agent_class;
  std::string kind;                   // reply, observe, method, method_async, memory
  std::string method;                 // method / method_async
  std::vector<std::string> consumed;  // call ids of the placeholders it took as input
  std::int64_t enqueued_unix_ns = 0;  // wall clock when the call was queued
  std::int64_t queue_wait_ns = 0;     // queued -> started (includes waiting for its input)
  std::int64_t run_ns = 0;            // agent code's run time
  std::uint64_t model_calls = 0;      // model calls the agent made during the call
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::string outcome;  // "ok", or the error code's name (e.g. "agent_failed")
  std::string error_message;
  std::string trace_id;  // the caller's trace (AgentRef::with_trace_id); empty: none
  // The content of the call's input message and of its reply (reply, method_async), each cut to
  // at most kSpanPreviewBytes (at a UTF-8 character boundary): what a console shows of a call.
  static constexpr std::size_t kSpanPreviewBytes = 256;
  std::string input;
  std::string output;
  std::vector<ToolCallSpan> tool_calls;  // the MCP tool calls the agent made during the call
};

class ChunkRange;

// The future result of an agent call. Returned at once; pass it to other agents before it is
// ready, or get() it. Failures surface from get() as agentd::Error naming the agent that failed.
class Placeholder {
 public:
  // Blocks until the message is there (or the client's default timeout passes).
  Msg get() const;
  // Blocks at most timeout; throws Error(timeout, retryable) after it.
  Msg get(std::chrono::milliseconds timeout) const;

  // Inside an asynchronous agent (agentd/task.h): `agentd::Msg m = co_await p;` waits for the
  // message without holding a thread and throws what get() would throw. There get() fails at
  // once instead (it would block the server's event loop).
  detail::PlaceholderAwaiter operator co_await() const { return detail::PlaceholderAwaiter(s_); }

  // Runs fn once the result is there (get() no longer blocks; it returns or throws at once):
  // on the thread that receives it (the client's loop thread), or on the calling thread now when
  // it is there already. For code that must not park a thread per call (event loops of other
  // libraries: an HTTP server, Python's asyncio): fn hands the news to its own loop and returns.
  // As for on_chunk(), fn must return quickly, must not block on this client and must not hold
  // the last reference to its Client, AgentRef or Placeholder. Each call registers one more fn.
  void on_ready(std::function<void()> fn) const;

  const std::string& call_id() const;
  // The producing server's advertised address ("host:port"; empty in local mode).
  const std::string& origin() const;

  // What the agent's models did during this call (model calls and their tokens, as its trace
  // span counts them), once the result is there (get() returned or threw, on_ready ran); a
  // failed call reports what it used before failing. Zeros before that, for a call that used
  // no model, and from servers too old to send it. Does not wait.
  CallUsage usage() const;

  // ---- Streamed replies (AgentRef::reply_stream) ----
  // The chunks the agent emits (Agent::emit_chunk) arrive here in order, all before the call's
  // result; get() still returns the whole message. A chunk is read once: by next_chunk() /
  // chunks() or by the on_chunk() callback. A placeholder that is not streamed has no chunks.

  // Blocks until the next chunk arrives (at most timeout: the client's timeout by default, then
  // Error(timeout, retryable)). std::nullopt once the call has finished and every chunk has been
  // read; when the call failed, throws its agentd::Error after the chunks sent before the failure.
  std::optional<std::string> next_chunk() const;
  std::optional<std::string> next_chunk(std::chrono::milliseconds timeout) const;
  // next_chunk() as a range: for (const std::string& c : p.chunks()) ...
  ChunkRange chunks() const;
  // Hands every chunk not yet read, then each new one, to fn, on the client's loop thread (the
  // thread that receives the connection's messages): fn must return quickly, must not block on
  // this client (no get(), no calls) and must not hold this Client, AgentRef or Placeholder
  // (the loop thread must never drop the last reference to its client). Exceptions fn throws
  // are caught and logged. Replaces an earlier callback; next_chunk() then sees no more chunks.
  // The call's end is not reported to fn: get() tells it. Set before the result arrives, fn has
  // seen every chunk when get() returns and is never called again; set later, it gets the
  // chunks left shortly after (on the loop thread). fn is destroyed on the loop thread once the
  // stream has ended; keep what it uses alive until then.
  void on_chunk(std::function<void(std::string_view chunk)> fn) const;

 private:
  friend class AgentRef;
  explicit Placeholder(std::shared_ptr<detail::PlaceholderState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::PlaceholderState> s_;
};

// The chunks of a streamed reply as an input range (Placeholder::chunks()): each step blocks
// like Placeholder::next_chunk() and throws what it throws.
class ChunkIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = std::string;
  using difference_type = std::ptrdiff_t;
  using pointer = const std::string*;
  using reference = const std::string&;

  ChunkIterator() = default;
  explicit ChunkIterator(Placeholder p) : p_(std::move(p)) { ++*this; }
  const std::string& operator*() const { return *chunk_; }
  const std::string* operator->() const { return &*chunk_; }
  ChunkIterator& operator++() {
    chunk_ = p_ ? p_->next_chunk() : std::nullopt;
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const ChunkIterator& it, std::default_sentinel_t) { return !it.chunk_; }

 private:
  std::optional<Placeholder> p_;
  std::optional<std::string> chunk_;
};

class ChunkRange {
 public:
  explicit ChunkRange(Placeholder p) : p_(std::move(p)) {}
  ChunkIterator begin() const { return ChunkIterator(p_); }
  std::default_sentinel_t end() const { return {}; }

 private:
  Placeholder p_;
};

inline ChunkRange Placeholder::chunks() const { return ChunkRange(*this); }

// A handle on one agent on one server. Cheap to copy.
class AgentRef {
 public:
  const std::string& id() const { return id_; }
  const std::string& name() const { return name_; }
  const std::string& class_name() const { return class_name_; }

  // Queues a reply; returns at once. Calls to one agent run in the order they were made.
  Placeholder reply(const Msg& x) const;
  Placeholder reply(const Placeholder& x) const;  // runs once x is ready
  Placeholder reply() const;                      // no input
  Placeholder operator()(const Msg& x) const { return reply(x); }
  Placeholder operator()(const Placeholder& x) const { return reply(x); }

  // reply(), streamed: the chunks the agent emits while producing the reply reach the returned
  // placeholder as they are made (Placeholder::next_chunk / chunks / on_chunk). get() and agents
  // given the placeholder, on any server, still receive the whole message.
  Placeholder reply_stream(const Msg& x) const;
  Placeholder reply_stream(const Placeholder& x) const;

  // Queues an observation (Agent::observe); returns once the server has queued it.
  void observe(const Msg& x) const;
  void observe(const Placeholder& x) const;

  // A named method, synchronously (waits for the calls queued before it).
  Value call(const std::string& method, const Value& args = Value::object()) const;
  // A named method, as a placeholder whose message content is the method's value.
  Placeholder call_async(const std::string& method, const Value& args = Value::object()) const;

  // The agent's memory, after every call queued before this one.
  std::vector<Msg> memory() const;

  // This agent, with a deadline on every call made through the returned reference: a call not
  // finished `timeout` after the server queued it fails with timeout (a running call's agent
  // code cannot be stopped; see README "Stuck agents"). 0: the server's --call-timeout /
  // --class-call-timeout. Throws Error(bad_args) for a negative timeout.
  AgentRef with_timeout(std::chrono::milliseconds timeout) const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  // This agent, with every call made through the returned reference recorded in trace_id's
  // trace: the server's span of each call carries it (TraceSpan::trace_id, `agentctl trace`,
  // --trace-file), e.g. the trace-id of the W3C traceparent an HTTP request came with. At most
  // 128 bytes of printable ASCII, else throws Error(bad_args); empty: none.
  AgentRef with_trace_id(std::string trace_id) const;
  const std::string& trace_id() const { return trace_id_; }
  AgentInfo info() const;

  // This reference as a Value ({"agentd_agent_ref": {id, name, class, address, server_id}}), to
  // hand an agent to another agent inside args or message content (nested agents).
  Value to_value() const;
  static bool is_ref(const Value& v);
  // Opens a connection to the server a to_value() names and returns the agent there.
  // Inside agent code prefer connect_agent(), which shares connections.
  static AgentRef from_value(const Value& ref, ClientOptions options = {});

 private:
  friend class Client;
  AgentRef(std::shared_ptr<detail::ClientCore> core, std::string id, std::string name, std::string class_name)
      : core_(std::move(core)),
        id_(std::move(id)),
        name_(std::move(name)),
        class_name_(std::move(class_name)) {}
  Placeholder send_reply(const Placeholder* input, const Msg* msg, bool stream = false) const;

  friend AgentRef connect_agent(Agent& caller, const Value& ref);
  std::shared_ptr<detail::ClientCore> core_;
  std::string id_;
  std::string name_;
  std::string class_name_;
  std::chrono::milliseconds timeout_{0};  // with_timeout(); 0: the server's
  std::string trace_id_;                  // with_trace_id(); empty: none
};

// What this client has done over its connection (independent and child mode; zeros in local mode
// for the byte counts).
struct ClientStats {
  std::uint64_t bytes_sent = 0;      // to the server, all RPC traffic
  std::uint64_t bytes_received = 0;  // from the server
  std::uint64_t requests = 0;        // calls and requests made (batched calls count one each)
  std::uint64_t waits = 0;           // times a calling thread blocked for a server's answer
};

class Client {
 public:
  // Throws Error(disconnected, retryable) when the server cannot be reached. host "unix:PATH"
  // reaches a server's --unix-socket PATH (port ignored; no TLS there).
  static Client connect(const std::string& host, std::uint16_t port, ClientOptions options = {});
  // Throws Error when as_server cannot be found or does not start (naming why).
  static Client spawn_child(ChildOptions options = {});
  // Throws Error(plugin_error / config_error) like as_server would. Local mode runs a server in
  // this process, so it is in libagentd (CMake agentd::agentd, pkg-config agentd), not in the
  // client library: a program linked with agentd::client alone that calls it fails to link with
  // "undefined reference to agentd::Client::local".
  static Client local(LocalOptions options = {});

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();  // child mode: stops the child server

  // Creates an agent of a class the server knows. Empty name: the id. Empty id: generated.
  AgentRef create_agent(const std::string& class_name, const std::string& name = {},
                        const Value& args = Value::object(), const std::string& id = {});
  // Creates count agents of one class with the same args, in a few messages (much faster than
  // count create_agent calls). Names are name_prefix + index (first_index, first_index + 1, ...),
  // or the ids when the prefix is empty. All or nothing: when any fails, those made are deleted again and the
  // first error is thrown; after the client's timeout it stops, deletes those made (and those still being
  // made, as they finish) and throws Error(timeout).
  std::vector<AgentRef> create_agents(const std::string& class_name, std::size_t count,
                                      const Value& args = Value::object(),
                                      const std::string& name_prefix = {}, std::size_t first_index = 0);
  // An existing agent; throws Error(unknown_agent) when there is none.
  AgentRef agent(const std::string& id);
  // A new agent of source_id's class made with its args, a copy of its memory and of what its
  // save_state() returns (AgentScope's clone_agent), taken after the calls made on it before.
  // Empty name: the new id; empty id: generated. Throws Error (unknown_agent, duplicate_agent,
  // or what the copy's constructor or load_state() threw).
  AgentRef clone_agent(const std::string& source_id, const std::string& name = {},
                       const std::string& id = {});
  std::vector<AgentInfo> list_agents();
  // A page of the server's agents (AgentQuery); the server filters and sorts them.
  AgentPage query_agents(const AgentQuery& query);
  void delete_agent(const std::string& id);
  std::size_t delete_all_agents();
  ServerInfo info();
  void ping();
  // Asks the server to stop (it finishes running calls first).
  void stop();
  // Closes this client now (the connection, its reconnecting, a child server), even while
  // AgentRefs and Placeholders of it live on: their calls and waits then fail with
  // Error(disconnected). Idempotent; the destructor does the same. Not from agent code running
  // on this client's callbacks.
  void close();
  // Replaces the server's model configs (YAML or JSON text). Returns the new config version.
  std::uint64_t set_model_configs(const std::string& text);
  // The server's most recent trace spans (at most limit; 0: all it keeps), oldest first.
  std::vector<TraceSpan> traces(std::uint32_t limit = 0);

  // The server's MCP tool servers (as_server --tool-config-path) and their tools, in config
  // order (`agentctl tools`). start: start those not running yet and wait for them (up to their
  // start_timeout), so every one that can start lists its tools; false: what is known now.
  std::vector<ToolServerInfo> tools(bool start = true);
  // Calls one tool on the server, as an operator (`agentctl tool SERVER TOOL [JSON]`): the
  // call belongs to no agent. Throws what Tools::call throws (agentd/tool.h). timeout: the tool
  // server's call_timeout when unset.
  ToolResult call_tool(const std::string& server, const std::string& tool,
                       const Value& arguments = Value::object(),
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  ClientStats stats();

  // "host:port" of the server (its advertised address); "local" in local mode.
  const std::string& address() const;
  const std::string& server_id() const;
  std::uint16_t port() const;  // 0 in local mode

 private:
  explicit Client(std::shared_ptr<detail::ClientCore> core) : core_(std::move(core)) {}
  std::shared_ptr<detail::ClientCore> core_;
};

// Inside agent code: the agent an AgentRef::to_value() names, reached over a connection the
// hosting server keeps per address (one per peer server, shared by its agents).
// Throws Error(bad_args) when ref is not an agent reference, Error(disconnected) when its server
// cannot be reached. A blocking agent's call checks that the agent exists; an asynchronous
// agent's (which must not wait) trusts the reference, and a missing agent fails the first call.
AgentRef connect_agent(Agent& caller, const Value& ref);

}  // namespace agentd
