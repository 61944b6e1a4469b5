# The agentd wire contract: main processes, as_server daemons and their peers speak this.
#
# Expected failures (unknown agent, unknown class, bad arguments, agent code that threw, an
# expired result) travel as `Error` values inside results. Cap'n Proto exceptions are reserved
# for faults: a lost connection, an overloaded server, a bug.
#
# The bootstrap capability of every as_server connection is a `Gate`, whether or not the server
# requires a token: a client logs in first and gets the `AgentServer`.
@0xb3e24192b17dd5f4;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("agentd::wire");

struct Value {
  # A JSON-like value tree (agentd::Value on the C++ side). Binary stays binary.
  union {
    null @0 :Void;
    bool @1 :Bool;
    int @2 :Int64;
    uint @3 :UInt64;
    float @4 :Float64;
    text @5 :Text;
    data @6 :Data;
    list @7 :List(Value);
    object @8 :List(Field);
  }
  struct Field {
    key @0 :Text;
    value @1 :Value;
  }
}

struct Msg {
  id @0 :Text;
  name @1 :Text;
  role @2 :Text;
  content @3 :Value;
  metadata @4 :Value;
  url @5 :List(Text);
  timestamp @6 :Text;
}

enum ErrorCode {
  internal @0;
  unknownAgent @1;
  unknownClass @2;
  badArgs @3;
  agentFailed @4;
  expired @5;
  duplicateCallId @6;
  unknownMethod @7;
  disconnected @8;
  timeout @9;
  overloaded @10;
  badRequest @11;
  modelError @12;
  unauthenticated @13;
  duplicateAgent @14;
  stopping @15;
  unknownCall @16;
  configError @17;
  pluginError @18;
  tooLarge @19;      # a message over the size one Cap'n Proto message can carry
  notApplied @20;    # the call had no effect (lost in a restart, or its state could not be
                     # saved): safe to retry
  interrupted @21;   # the call may have run, in whole or in part (it was running when its
                     # server died, or the server can no longer tell): not safe to retry blindly
  toolError @22;     # an MCP tool server failed (it could not start, died, answered garbage or
                     # too much, or refused the request)
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
  agentId @2 :Text;
  agentClass @3 :Text;
  retryable @4 :Bool;
}

struct Outcome {
  # What a call produced: its message, or the error that stopped it.
  union {
    msg @0 :Msg;
    error @1 :Error;
    tooLarge @2 :UInt64;
    # The message is bigger than the reader's inlineLimit (about this many bytes): ask again
    # without a limit when it is really wanted.
  }
  usage @3 :CallUsage;
  # The model use of the call that produced it, whichever way the outcome travels (eagerly,
  # read later, fetched by a peer, restored from a state dir). Null when the agent used no
  # model during the call (and from servers older than this field).
}

struct CallUsage {
  # What an agent's models did during one call: the model calls it made while the call ran, and
  # the tokens those calls reported.
  modelCalls @0 :UInt64;
  promptTokens @1 :Int64;
  completionTokens @2 :Int64;
}

struct ValueOutcome {
  union {
    value @0 :Value;
    error @1 :Error;
  }
}

interface Result {
  # The pending or finished result of one call, held in the producing server's result pool.
  get @0 (inlineLimit :UInt64) -> (outcome :Outcome);
  # inlineLimit 0: always the whole message. Clients ask eagerly with a limit, so small results
  # arrive without an extra round trip and large ones never travel unasked.
}

struct PlaceholderRef {
  # A placeholder passed as the input of another call: the producing server resolves it by call
  # id when the consumer is on it too, any other server fetches it from origin (AgentServer.fetch).
  origin @0 :Text;       # the producing server's advertised address, "host:port"
  serverId @1 :Text;     # the producing server's id
  callId @2 :Text;
}

struct Input {
  union {
    none @0 :Void;
    msg @1 :Msg;
    placeholder @2 :PlaceholderRef;
  }
}

interface Agent {
  # One agent as a capability, a call per message (AgentServer.createAgent / agent): the open
  # protocol for clients in other languages. Promise pipelining works on it: createAgent, reply
  # on the pipelined agent and get on the pipelined Result can all be sent before anything
  # answers. The C++ client sends its calls through Session instead (many per message); both
  # go through the same queueing into the agent's mailbox and the server's result pool.
  reply @0 (input :Input, callId :Text, inlineLimit :UInt64, traceId :Text)
      -> (result :Result, outcome :Outcome);
  # Queues a reply behind the agent's earlier calls. callId empty: the server picks one.
  # inlineLimit 0: returns at once with the Result. inlineLimit > 0: returns when the call is
  # done, with the outcome inline (tooLarge above the limit); the Result can be pipelined on
  # before that, as placeholders do. traceId: as CallSpec.traceId.

  observe @1 (input :Input) -> (error :Error);
  # Queues an observation; returns once it is queued (error set only if it could not be).

  call @2 (method :Text, args :Value) -> (outcome :ValueOutcome);
  # A named synchronous method; runs in the agent's order like every other call.

  callAsync @3 (method :Text, args :Value, callId :Text, inlineLimit :UInt64, traceId :Text)
      -> (result :Result, outcome :Outcome);
  # A named method whose value arrives as a Msg with the value as content (inlineLimit as reply).

  memory @4 () -> (msgs :List(Msg), error :Error);
  info @5 () -> (agent :AgentInfo, error :Error);
}

struct AgentInfo {
  id @0 :Text;
  name @1 :Text;
  className @2 :Text;
  queuedCalls @3 :UInt32;
  completedCalls @4 :UInt64;
  failedCalls @5 :UInt64;
  lastCallUnixMs @6 :Int64;       # when its last call finished; 0: none since the server started
  modelCalls @7 :UInt64;          # its model use since the server started
  promptTokens @8 :Int64;
  completionTokens @9 :Int64;
}

struct Histogram {
  # Durations: counts[i] were <= bounds[i] (and > bounds[i-1]), not cumulative; count is all of
  # them (those over the last bound included); sum in seconds.
  bounds @0 :List(Float64);
  counts @1 :List(UInt64);
  count @2 :UInt64;
  sum @3 :Float64;
}

struct ModelStats {
  # One model config's calls since the server started (across reloads).
  configName @0 :Text;
  modelType @1 :Text;
  modelName @2 :Text;
  calls @3 :UInt64;
  errors @4 :UInt64;
  promptTokens @5 :Int64;
  completionTokens @6 :Int64;
  latency @7 :Histogram;
}

struct AgentQuery {
  # AgentServer.queryAgents: a page of agents, filtered and sorted by the server.
  enum Sort { id @0; name @1; className @2; calls @3; errors @4; queued @5; lastCall @6; tokens @7; }
  search @0 :Text;       # ASCII case-insensitive substring of id, name or class; empty: all
  className @1 :Text;    # exactly this class; empty: any
  sort @2 :Sort;         # ties broken by id
  descending @3 :Bool;
  offset @4 :UInt64;
  limit @5 :UInt32;      # the server answers at most 1000
}

struct ServerInfo {
  serverId @0 :Text;
  version @1 :Text;
  pid @2 :Int64;
  uptimeSeconds @3 :Float64;
  rssBytes @4 :UInt64;
  cpuSeconds @5 :Float64;
  agentCount @6 :UInt64;
  poolSize @7 :UInt64;
  advertiseAddress @8 :Text;
  classes @9 :List(Text);
  workers @10 :UInt32;
  callsCompleted @11 :UInt64;
  callsFailed @12 :UInt64;
  maxPoolSize @13 :UInt64;
  maxExpireSeconds @14 :Float64;
  modelConfigs @15 :List(Text);
  callsQueued @16 :UInt64;
  bytesClientIn @17 :UInt64;
  bytesClientOut @18 :UInt64;
  bytesPeerIn @19 :UInt64;
  bytesPeerOut @20 :UInt64;
  modelConfigVersion @21 :UInt64;     # bumped by every reload (SIGHUP, setModelConfigs)
  modelCalls @22 :UInt64;             # model calls of all agents since start, failed ones included
  modelErrors @23 :UInt64;
  modelPromptTokens @24 :Int64;
  modelCompletionTokens @25 :Int64;
  stateDir @26 :Text;                 # as_server --state-dir; empty: agents live in memory only
  stateBytes @27 :UInt64;             # the state database on disk (with its WAL)
  stateLastCommitUnixMs @28 :Int64;   # the last commit since start; 0: none yet
  stateError @29 :Text;               # why the store stopped saving (then calls fail not_applied)
  workersBusy @30 :UInt32;            # worker threads in an agent call (running or blocked)
  workersMax @31 :UInt32;             # --max-workers: at workersBusy == workersMax, calls wait
  callsSlow @32 :UInt64;              # calls in progress past --slow-call-warn now
  callsSlowTotal @33 :UInt64;         # calls ever reported (logged) as slow
  callsTimedOut @34 :UInt64;          # calls failed with timeout at their deadline
  authRequired @35 :Bool;             # --auth-token-file: clients must log in with a token
  tls @36 :Bool;                      # the TCP listener speaks TLS (--tls-cert)
  callsRunning @37 :UInt64;
  callLatency @38 :Histogram;         # run times of finished agent calls
  models @39 :List(ModelStats);       # each model config, sorted by name
  lanesOpen @40 :UInt32;              # synchronous lanes being served now
  laneThreads @41 :UInt32;            # the most (--lane-threads; 0: lanes off)
  laneCalls @42 :UInt64;              # calls answered on lanes since start
}

struct Span {
  # One finished agent call (AgentServer.traces).
  callId @0 :Text;             # empty for observe / method / memory calls
  agentId @1 :Text;
  agentClass @2 :Text;
  kind @3 :Text;               # reply, observe, method, method_async, memory
  method @4 :Text;
  consumed @5 :List(Text);     # call ids of the placeholders it consumed as input
  enqueuedUnixNs @6 :Int64;    # wall clock, when the call was queued
  queueWaitNs @7 :Int64;       # enqueue -> start (includes waiting for placeholder inputs)
  runNs @8 :Int64;
  outcome @9 :Text;            # "ok", or the error code (e.g. "agent_failed")
  errorMessage @10 :Text;
  seq @11 :UInt64;             # 1, 2, ... in finishing order on this server
  modelCalls @12 :UInt64;      # model calls the agent made during this call
  promptTokens @13 :Int64;
  completionTokens @14 :Int64;
  traceId @15 :Text;           # the trace the caller made the call in (CallSpec.traceId); empty: none
  input @16 :Text;             # the input message's content, cut to 256 bytes (UTF-8 safe)
  output @17 :Text;            # the reply's content (reply, methodAsync), cut the same way
  toolCalls @18 :List(ToolCallSpan);  # the MCP tool calls the agent made during this call
}

struct ToolCallSpan {
  tool @0 :Text;               # "SERVER/TOOL"
  startUnixNs @1 :Int64;
  durationNs @2 :Int64;
  outcome @3 :Text;            # "ok", "is_error" (the tool reported a failure), or an error code
  errorMessage @4 :Text;
}

struct ToolUsage {
  calls @0 :UInt64;
  failures @1 :UInt64;
  latencyUsTotal @2 :Int64;
}

struct ToolInfo {
  server @0 :Text;
  name @1 :Text;
  title @2 :Text;
  description @3 :Text;
  inputSchema @4 :Value;
  outputSchema @5 :Value;      # unset: none declared
  annotations @6 :Value;       # unset: none
  usage @7 :ToolUsage;
}

struct ToolServerInfo {
  # One MCP tool server configured on the server (as_server --tool-config-path).
  name @0 :Text;
  transport @1 :Text;          # stdio, http
  state @2 :Text;              # idle, starting, running, restarting, failed, stopped
  error @3 :Text;
  protocolVersion @4 :Text;
  serverName @5 :Text;
  serverVersion @6 :Text;
  restarts @7 :UInt32;
  tools @8 :List(ToolInfo);
  usage @9 :ToolUsage;
}

enum CallKind {
  reply @0;
  observe @1;
  method @2;        # a named synchronous method: the value comes back in CallDone.value
  methodAsync @3;   # a named method whose value is a result in the pool (like reply)
  memory @4;
  create @5;        # create agent `agentId` (may be empty: the server picks) of `className`
}

struct CallSpec {
  # One call in a Session.submit batch. Calls are queued in list order, after everything the
  # connection sent before, so per-agent order is the order the client issued them in.
  ticket @0 :UInt64;      # the client's tag for this call, echoed in its CallDone
  kind @1 :CallKind;
  agentId @2 :Text;
  callId @3 :Text;        # reply / methodAsync: the result pool key (client-chosen, unique)
  input @4 :Input;        # reply / observe
  method @5 :Text;        # method / methodAsync
  args @6 :Value;         # method / methodAsync / create
  inlineLimit @7 :UInt64; # reply / methodAsync: the outcome comes back inline up to this size
  className @8 :Text;     # create
  name @9 :Text;          # create
  report @10 :Bool = true;
  # reply / methodAsync: false when the client no longer holds the placeholder (it was passed on
  # and dropped before the call was sent): no CallDone for it; the result still goes to the pool.
  stream @11 :Bool;
  # reply / methodAsync (with report): the client reads the reply's chunks as the agent emits
  # them (CallSink.chunks, each call's before its CallDone). Only this batched path streams; the
  # per-capability Agent.reply does not.
  timeoutMs @12 :UInt64;
  # reply / observe / method / methodAsync / memory: the call's deadline, in ms after the server
  # queued it, over the server's --call-timeout / --class-call-timeout; 0: the server's.
  traceId @13 :Text;
  # reply / observe / method / methodAsync / memory: the trace the call belongs to (e.g. the
  # trace-id of a W3C traceparent an HTTP request came with), recorded in the call's span. At
  # most 128 bytes of printable ASCII (a longer or odd one fails the call with badRequest);
  # empty: none.
}

struct Chunk {
  # A piece of a streamed reply (CallSpec.stream), in emission order: seq 0, 1, 2, ... per call.
  ticket @0 :UInt64;
  seq @1 :UInt32;
  text @2 :Text;
}

struct CallDone {
  # A call of a Session finished (or could not be queued).
  ticket @0 :UInt64;
  union {
    outcome @1 :Outcome;     # reply, methodAsync (tooLarge: read it with Session.read)
    value @2 :ValueOutcome;  # method
    memory @3 :List(Msg);    # memory
    error @4 :Error;         # memory, observe or create that failed
    done @5 :Void;           # observe queued
    created @6 :Text;        # create: the new agent's id
  }
}

interface CallSink {
  # Implemented by the client: the server reports finished calls in batches, in finishing order,
  # each message of at most about 8 MiB (Cap'n Proto refuses messages over 64 MiB): a burst of
  # completions goes as several messages. One CallDone too big for any message (a huge memory
  # or method value) is sent as an error with code tooLarge instead.
  done @0 (calls :List(CallDone)) -> ();
  chunks @1 (chunks :List(Chunk)) -> ();
  # Chunks of streamed calls, batched like done. done and chunks messages go out in one order,
  # so a call's chunks always arrive before its CallDone. A chunk over about 8 MiB is split.
}

interface Session {
  # The batched call path: many calls per message in, many completions per message out.
  submit @0 (calls :List(CallSpec), dropped :List(UInt64), answerLone :Bool)
      -> (refused :List(CallDone), done :List(CallDone));
  # refused: the calls not queued because a limit was reached (each an error with code
  # overloaded; they get no other CallDone). Nothing of them is recorded, so the client may send
  # them again with the same tickets, in ticket order; until one is queued, the agent's later
  # calls on this session are refused too (per-agent order). dropped: tickets of refused calls
  # the client gave up on (the session forgets them before the calls).
  # answerLone: the submit carries one call, reported and not streamed: the server answers the
  # submit when that call finishes, its CallDone in done, instead of a CallSink.done of its own
  # (one RPC per call instead of two: three messages instead of six). A refused call is answered
  # at once (refused); a CallDone too big for about one batch goes to the sink as usual, and so
  # does everything when the server predates the field: the client takes a CallDone from either.
  read @1 (callId :Text) -> (outcome :Outcome, forgottenAgeMs :Int64 = -1);
  # The whole result of a call (after a tooLarge outcome, or after a reconnect), waiting while
  # it is pending. For an unknown call id (outcome: error unknownCall), forgottenAgeMs says how
  # long ago the newest result the server forgot finished (trimmed from its pool, or lost with a
  # crash of its machine): a call sent after that never ran here; one sent before may have run
  # and finished before it. -1: the server never forgot a finished call.
}

interface AgentServer {
  createAgent @0 (className :Text, name :Text, args :Value, agentId :Text)
      -> (agent :Agent, id :Text, error :Error);
  # agentId may be empty: the server then picks one. args unset: the same as {}. Answers once
  # the agent's constructor has run.

  agent @1 (id :Text) -> (agent :Agent, error :Error);
  deleteAgent @2 (id :Text) -> (error :Error);
  # With --state-dir, answers once the deletion is saved.
  deleteAllAgents @3 () -> (count :UInt64);
  listAgents @4 () -> (agents :List(AgentInfo));
  info @5 () -> (info :ServerInfo);
  fetch @6 (callId :Text) -> (outcome :Outcome);
  # Resolves a result by call id; peers use it to read placeholders produced here.
  ping @7 () -> ();
  stop @8 () -> ();
  setModelConfigs @9 (yaml :Text) -> (error :Error, version :UInt64);
  traces @10 (limit :UInt32) -> (spans :List(Span));
  # The most recent finished calls (at most limit; 0: all kept), oldest first.
  session @11 (sink :CallSink) -> (session :Session);
  # Opens the batched call path; completions of its calls go to sink.
  cloneAgent @12 (sourceId :Text, name :Text, agentId :Text)
      -> (agent :Agent, id :Text, error :Error);
  # A new agent of the source's class, made with its args, a copy of its memory and of what
  # its save_state() returns (taken after the calls queued on it before). agentId and name may
  # be empty (the server picks the id; the name is then the id). Answers once the copy exists
  # (and, with --state-dir, is saved).
  queryAgents @13 (query :AgentQuery) -> (agents :List(AgentInfo), matched :UInt64, total :UInt64);
  # A page of the agents (a console's view of a server with a million of them).
  listTools @14 (start :Bool) -> (servers :List(ToolServerInfo));
  # The configured MCP tool servers and their tools. start: start those not running yet (idle,
  # or waiting to restart) and wait for them to initialize, so their tools are listed.
  callTool @15 (server :Text, tool :Text, args :Value, timeoutMs :UInt32)
      -> (result :Value, error :Error);
  # Calls one tool (an operator's call: it belongs to no agent). result: the CallToolResult as a
  # value ({"content": [...], "isError": ..., "structuredContent": ...}). timeoutMs 0: the tool
  # server's call_timeout.
}

interface Gate {
  # The bootstrap capability of every connection to an as_server. Nothing else is reachable
  # without logging in. With authentication on (as_server --auth-token-file), token must be one
  # of the server's tokens; with it off, any token (the empty one too) is accepted. A wrong token
  # gets error.code = unauthenticated and no server. Failed logins are rate-limited per address
  # and per server (token buckets): past the limit, an address's logins are refused at once,
  # unchecked, until its allowance grows back; nothing is answered slowly.
  login @0 (token :Text) -> (server :AgentServer, error :Error);
}

# The synchronous lane (README "The synchronous lane"): a plaintext TCP or Unix connection to
# the server's own port whose first eight bytes are "agdLANE1" (as a Cap'n Proto stream's
# segment count they would announce over a billion segments, and a TLS record starts 0x16, so
# the server tells the three apart by the first byte). Then Cap'n Proto messages in the stream
# framing, with no RPC: the client's LaneHello, the server's LaneWelcome, then LaneCall and
# LaneAnswer in turn. The server reads a lane on a thread of its own, which runs a blocking
# agent's call itself when the agent is idle: a call costs one message each way and no thread
# hand-off in the server. A lane is one caller's: it carries one call at a time.

struct LaneHello {
  token @0 :Text;
  # As Gate.login's (empty: authentication off).
}

struct LaneWelcome {
  union {
    ok @0 :Void;
    refused @1 :Error;
    # A wrong token (unauthenticated, the connection then closes), a server that serves TLS only
    # or has all its lane threads busy (overloaded: use the RPC connection).
  }
  serverId @2 :Text;
  # The server's id (AgentServer.info's), for the placeholders the lane's calls make.
  idleCloseMs @3 :UInt32;
  # The server closes a lane that carries no call this long (--lane-idle-timeout); 0: never. A
  # client opens a new lane rather than write a call on one idle for half of this, so that a call
  # is never written to a lane the server is closing.
}

struct LaneCall {
  agentId @0 :Text;
  callId @1 :Text;
  # The result pool key, as CallSpec.callId: unique per server, the call is looked up by it after
  # a lost lane, and its result is there for other agents to consume as a placeholder.
  input @2 :Msg;
  # A reply's input message; not set: no input.
  timeoutMs @3 :UInt32;
  # The caller's deadline after the call is queued; 0: the server's (--call-timeout).
}

struct LaneAnswer {
  callId @0 :Text;
  outcome @1 :Outcome;
  # Never tooLarge: a lane answers with the whole message.
}
