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
}

AgentInfo read_agent_info(wire::AgentInfo::Reader in) {
  return AgentInfo{.id = to_std(in.getId()),
                   .name = to_std(in.getName()),
                   .class_name = to_std(in.getClassName()),
                   .queued_calls = in.getQueuedCalls(),
                   .completed_calls = in.getCompletedCalls(),
                   .failed_calls = in.getFailedCalls()};
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
  return s;
}

}  // namespace agentd::detail
