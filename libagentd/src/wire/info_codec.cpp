#include "info_codec.h"

#include "value_codec.h"

#include <string>
#include <vector>

namespace agentd::detail {

void write_agent_info(const AgentInfo& a, wire::AgentInfo::Builder out) {
  out.setId(to_kj(a.id));
  out.setName(to_kj(a.name));
  out.setClassName(to_kj(a.class_name));
  out.setQueuedCalls(a.queued_calls);
  out.setCompletedCalls(a.completed_calls);
  out.setFailedCalls(a.failed_calls);
  out.setLastCallUnixMs(a.last_call_unix_ms);
  out.setModelCalls(a.model_calls);
  out.setPromptTokens(a.prompt_tokens);
  out.setCompletionTokens(a.completion_tokens);
}

AgentInfo read_agent_info(wire::AgentInfo::Reader in) {
  return AgentInfo{.id = to_std(in.getId()),
                   .name = to_std(in.getName()),
                   .class_name = to_std(in.getClassName()),
                   .queued_calls = in.getQueuedCalls(),
                   .completed_calls = in.getCompletedCalls(),
                   .failed_calls = in.getFailedCalls(),
                   .last_call_unix_ms = in.getLastCallUnixMs(),
                   .model_calls = in.getModelCalls(),
                   .prompt_tokens = in.getPromptTokens(),
                   .completion_tokens = in.getCompletionTokens()};
}

void write_histogram(const Histogram& h, wire::Histogram::Builder out) {
  auto bounds = out.initBounds(static_cast<unsigned>(h.bounds.size()));
  for (unsigned i = 0; i < h.bounds.size(); ++i) bounds.set(i, h.bounds[i]);
  auto counts = out.initCounts(static_cast<unsigned>(h.counts.size()));
  for (unsigned i = 0; i < h.counts.size(); ++i) counts.set(i, h.counts[i]);
  out.setCount(h.count);
  out.setSum(h.sum);
}

Histogram read_histogram(wire::Histogram::Reader in) {
  Histogram h;
  for (double b : in.getBounds()) h.bounds.push_back(b);
  for (std::uint64_t c : in.getCounts()) h.counts.push_back(c);
  h.counts.resize(h.bounds.size());  // a peer's malformed histogram cannot make them differ
  h.count = in.getCount();
  h.sum = in.getSum();
  return h;
}

void write_server_info(const ServerInfo& s, wire::ServerInfo::Builder out) {
  out.setServerId(to_kj(s.server_id));
  out.setVersion(to_kj(s.version));
  out.setPid(s.pid);
  out.setUptimeSeconds(s.uptime_seconds);
  out.setRssBytes(s.rss_bytes);
  out.setCpuSeconds(s.cpu_seconds);
  out.setAgentCount(s.agent_count);
  out.setPoolSize(s.pool_size);
  out.setAdvertiseAddress(to_kj(s.advertise_address));
  write_texts(s.classes, out.initClasses(static_cast<unsigned>(s.classes.size())));
  out.setWorkers(s.workers);
  out.setCallsCompleted(s.calls_completed);
  out.setCallsFailed(s.calls_failed);
  out.setMaxPoolSize(s.max_pool_size);
  out.setMaxExpireSeconds(s.max_expire_seconds);
  write_texts(s.model_configs, out.initModelConfigs(static_cast<unsigned>(s.model_configs.size())));
  out.setCallsQueued(s.calls_queued);
  out.setBytesClientIn(s.bytes_client_in);
  out.setBytesClientOut(s.bytes_client_out);
  out.setBytesPeerIn(s.bytes_peer_in);
  out.setBytesPeerOut(s.bytes_peer_out);
  out.setModelConfigVersion(s.model_config_version);
  out.setModelCalls(s.model_calls);
  out.setModelErrors(s.model_errors);
  out.setModelPromptTokens(s.model_prompt_tokens);
  out.setModelCompletionTokens(s.model_completion_tokens);
  out.setStateDir(to_kj(s.state_dir));
  out.setStateBytes(s.state_bytes);
  out.setStateLastCommitUnixMs(s.state_last_commit_unix_ms);
  out.setStateError(to_kj(s.state_error));
  out.setWorkersBusy(s.workers_busy);
  out.setWorkersMax(s.workers_max);
  out.setCallsSlow(s.calls_slow);
  out.setCallsSlowTotal(s.calls_slow_total);
  out.setCallsTimedOut(s.calls_timed_out);
  out.setLanesOpen(s.lanes_open);
  out.setLaneThreads(s.lane_threads);
  out.setLaneCalls(s.lane_calls);
  out.setAuthRequired(s.auth_required);
  out.setTls(s.tls);
  out.setCallsRunning(s.calls_running);
  write_histogram(s.call_latency, out.initCallLatency());
  auto models = out.initModels(static_cast<unsigned>(s.models.size()));
  for (unsigned i = 0; i < s.models.size(); ++i) {
    const ModelStats& m = s.models[i];
    auto w = models[i];
    w.setConfigName(to_kj(m.config_name));
    w.setModelType(to_kj(m.model_type));
    w.setModelName(to_kj(m.model_name));
    w.setCalls(m.calls);
    w.setErrors(m.errors);
    w.setPromptTokens(m.prompt_tokens);
    w.setCompletionTokens(m.completion_tokens);
    write_histogram(m.latency, w.initLatency());
  }
}

ServerInfo read_server_info(wire::ServerInfo::Reader in) {
  ServerInfo s;
  s.server_id = to_std(in.getServerId());
  s.version = to_std(in.getVersion());
  s.pid = in.getPid();
  s.uptime_seconds = in.getUptimeSeconds();
  s.rss_bytes = in.getRssBytes();
  s.cpu_seconds = in.getCpuSeconds();
  s.agent_count = in.getAgentCount();
  s.pool_size = in.getPoolSize();
  s.advertise_address = to_std(in.getAdvertiseAddress());
  s.classes = read_texts(in.getClasses());
  s.workers = in.getWorkers();
  s.calls_completed = in.getCallsCompleted();
  s.calls_failed = in.getCallsFailed();
  s.max_pool_size = in.getMaxPoolSize();
  s.max_expire_seconds = in.getMaxExpireSeconds();
  s.model_configs = read_texts(in.getModelConfigs());
  s.calls_queued = in.getCallsQueued();
  s.bytes_client_in = in.getBytesClientIn();
  s.bytes_client_out = in.getBytesClientOut();
  s.bytes_peer_in = in.getBytesPeerIn();
  s.bytes_peer_out = in.getBytesPeerOut();
  s.model_config_version = in.getModelConfigVersion();
  s.model_calls = in.getModelCalls();
  s.model_errors = in.getModelErrors();
  s.model_prompt_tokens = in.getModelPromptTokens();
  s.model_completion_tokens = in.getModelCompletionTokens();
  s.state_dir = to_std(in.getStateDir());
  s.state_bytes = in.getStateBytes();
  s.state_last_commit_unix_ms = in.getStateLastCommitUnixMs();
  s.state_error = to_std(in.getStateError());
  s.workers_busy = in.getWorkersBusy();
  s.workers_max = in.getWorkersMax();
  s.calls_slow = in.getCallsSlow();
  s.calls_slow_total = in.getCallsSlowTotal();
  s.calls_timed_out = in.getCallsTimedOut();
  s.lanes_open = in.getLanesOpen();
  s.lane_threads = in.getLaneThreads();
  s.lane_calls = in.getLaneCalls();
  s.auth_required = in.getAuthRequired();
  s.tls = in.getTls();
  s.calls_running = in.getCallsRunning();
  s.call_latency = read_histogram(in.getCallLatency());
  for (auto m : in.getModels())
    s.models.push_back(ModelStats{.config_name = to_std(m.getConfigName()),
                                  .model_type = to_std(m.getModelType()),
                                  .model_name = to_std(m.getModelName()),
                                  .calls = m.getCalls(),
                                  .errors = m.getErrors(),
                                  .prompt_tokens = m.getPromptTokens(),
                                  .completion_tokens = m.getCompletionTokens(),
                                  .latency = read_histogram(m.getLatency())});
  return s;
}

namespace {

void write_tool_usage(const ToolUsage& u, wire::ToolUsage::Builder out) {
  out.setCalls(u.calls);
  out.setFailures(u.failures);
  out.setLatencyUsTotal(u.latency_us_total);
}

ToolUsage read_tool_usage(wire::ToolUsage::Reader in) {
  return ToolUsage{
      .calls = in.getCalls(), .failures = in.getFailures(), .latency_us_total = in.getLatencyUsTotal()};
}

}  // namespace

void write_tool_server_info(const ToolServerInfo& s, wire::ToolServerInfo::Builder out) {
  out.setName(to_kj(s.name));
  out.setTransport(to_kj(s.transport));
  out.setState(to_kj(s.state));
  out.setError(to_kj(s.error));
  out.setProtocolVersion(to_kj(s.protocol_version));
  out.setServerName(to_kj(s.server_name));
  out.setServerVersion(to_kj(s.server_version));
  out.setRestarts(s.restarts);
  write_tool_usage(s.usage, out.initUsage());
  auto tools = out.initTools(static_cast<unsigned>(s.tools.size()));
  for (unsigned i = 0; i < tools.size(); ++i) {
    const ToolInfo& t = s.tools[i];
    tools[i].setServer(to_kj(t.server));
    tools[i].setName(to_kj(t.name));
    tools[i].setTitle(to_kj(t.title));
    tools[i].setDescription(to_kj(t.description));
    write_value(t.input_schema, tools[i].initInputSchema());
    if (!t.output_schema.is_null()) write_value(t.output_schema, tools[i].initOutputSchema());
    if (!t.annotations.is_null()) write_value(t.annotations, tools[i].initAnnotations());
    write_tool_usage(t.usage, tools[i].initUsage());
  }
}

ToolServerInfo read_tool_server_info(wire::ToolServerInfo::Reader in) {
  ToolServerInfo s;
  s.name = to_std(in.getName());
  s.transport = to_std(in.getTransport());
  s.state = to_std(in.getState());
  s.error = to_std(in.getError());
  s.protocol_version = to_std(in.getProtocolVersion());
  s.server_name = to_std(in.getServerName());
  s.server_version = to_std(in.getServerVersion());
  s.restarts = in.getRestarts();
  s.usage = read_tool_usage(in.getUsage());
  for (auto t : in.getTools()) {
    ToolInfo info;
    info.server = to_std(t.getServer());
    info.name = to_std(t.getName());
    info.title = to_std(t.getTitle());
    info.description = to_std(t.getDescription());
    info.input_schema = t.hasInputSchema() ? read_value(t.getInputSchema()) : Value::object();
    if (t.hasOutputSchema()) info.output_schema = read_value(t.getOutputSchema());
    if (t.hasAnnotations()) info.annotations = read_value(t.getAnnotations());
    info.usage = read_tool_usage(t.getUsage());
    s.tools.push_back(std::move(info));
  }
  return s;
}

}  // namespace agentd::detail
