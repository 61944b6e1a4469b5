#include "console/sampling.h"

#include <algorithm>

namespace gateway::console {

std::optional<agentd::Histogram> histogram_delta(const agentd::Histogram& now,
                                                 const agentd::Histogram& before) {
  if (now.bounds != before.bounds || now.counts.size() != before.counts.size() || now.count < before.count)
    return std::nullopt;
  agentd::Histogram d;
  d.bounds = now.bounds;
  d.counts.resize(now.counts.size());
  for (std::size_t i = 0; i < now.counts.size(); ++i) {
    if (now.counts[i] < before.counts[i]) return std::nullopt;
    d.counts[i] = now.counts[i] - before.counts[i];
  }
  d.count = now.count - before.count;
  d.sum = std::max(0.0, now.sum - before.sum);
  return d;
}

bool histogram_add(agentd::Histogram& sum, const agentd::Histogram& h) {
  if (sum.bounds.empty() && sum.count == 0) {
    sum = h;
    return true;
  }
  if (sum.bounds != h.bounds || sum.counts.size() != h.counts.size()) return false;
  for (std::size_t i = 0; i < h.counts.size(); ++i) sum.counts[i] += h.counts[i];
  sum.count += h.count;
  sum.sum += h.sum;
  return true;
}

namespace {

// later - earlier of a counter; 0 when it went down (a restart).
template <typename T>
double grew(T later, T earlier) {
  return later >= earlier ? static_cast<double>(later - earlier) : 0.0;
}

const agentd::ModelStats* model_named(const agentd::ServerInfo& info, const std::string& name) {
  for (const auto& m : info.models)
    if (m.config_name == name) return &m;
  return nullptr;
}

struct ModelSums {
  double calls = 0, errors = 0, prompt = 0, completion = 0;
  agentd::Histogram latency;
};

}  // namespace

Sample make_sample(const std::vector<ServerSnapshot>& before, const std::vector<ServerSnapshot>& now,
                   double seconds, std::int64_t t_unix_ms) {
  Sample s;
  s.t_unix_ms = t_unix_ms;
  double calls = 0, failed = 0, prompt = 0, completion = 0;
  agentd::Histogram latency;
  std::map<std::string, ModelSums> models;
  for (const auto& n : now) {
    if (!n.info) continue;
    const agentd::ServerInfo& ni = *n.info;
    s.agents += ni.agent_count;
    s.calls_running += ni.calls_running;
    s.calls_queued += ni.calls_queued;
    for (const auto& m : ni.models) models.try_emplace(m.config_name);
    auto b = std::find_if(before.begin(), before.end(),
                          [&n](const ServerSnapshot& x) { return x.address == n.address; });
    if (b == before.end() || !b->info || b->info->server_id != ni.server_id) continue;
    const agentd::ServerInfo& bi = *b->info;
    calls += grew(ni.calls_completed + ni.calls_failed, bi.calls_completed + bi.calls_failed);
    failed += grew(ni.calls_failed, bi.calls_failed);
    prompt += grew(ni.model_prompt_tokens, bi.model_prompt_tokens);
    completion += grew(ni.model_completion_tokens, bi.model_completion_tokens);
    if (auto d = histogram_delta(ni.call_latency, bi.call_latency)) histogram_add(latency, *d);
    for (const auto& m : ni.models) {
      const agentd::ModelStats* old = model_named(bi, m.config_name);
      if (!old) continue;  // a config added since: its first interval is not known
      ModelSums& sum = models[m.config_name];
      sum.calls += grew(m.calls, old->calls);
      sum.errors += grew(m.errors, old->errors);
      sum.prompt += grew(m.prompt_tokens, old->prompt_tokens);
      sum.completion += grew(m.completion_tokens, old->completion_tokens);
      if (auto d = histogram_delta(m.latency, old->latency)) histogram_add(sum.latency, *d);
    }
  }
  const double per = seconds > 0 ? 1.0 / seconds : 0.0;
  s.calls_per_s = calls * per;
  s.failed_per_s = failed * per;
  s.prompt_tokens_per_s = prompt * per;
  s.completion_tokens_per_s = completion * per;
  s.latency_p50 = latency.quantile(0.5);
  s.latency_p95 = latency.quantile(0.95);
  for (const auto& [name, sum] : models) {
    ModelRates& r = s.models[name];
    r.calls_per_s = sum.calls * per;
    r.errors_per_s = sum.errors * per;
    r.prompt_tokens_per_s = sum.prompt * per;
    r.completion_tokens_per_s = sum.completion * per;
    r.latency_p50 = sum.latency.quantile(0.5);
    r.latency_p95 = sum.latency.quantile(0.95);
  }
  return s;
}

namespace {

nlohmann::json maybe(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json sample_json(const Sample& s) {
  nlohmann::json models = nlohmann::json::object();
  for (const auto& [name, r] : s.models)
    models[name] = {{"calls_per_s", r.calls_per_s},
                    {"errors_per_s", r.errors_per_s},
                    {"latency_p50", maybe(r.latency_p50)},
                    {"latency_p95", maybe(r.latency_p95)},
                    {"prompt_tokens_per_s", r.prompt_tokens_per_s},
                    {"completion_tokens_per_s", r.completion_tokens_per_s}};
  return {{"t", s.t_unix_ms},
          {"calls_per_s", s.calls_per_s},
          {"failed_per_s", s.failed_per_s},
          {"latency_p50", maybe(s.latency_p50)},
          {"latency_p95", maybe(s.latency_p95)},
          {"prompt_tokens_per_s", s.prompt_tokens_per_s},
          {"completion_tokens_per_s", s.completion_tokens_per_s},
          {"agents", s.agents},
          {"calls_running", s.calls_running},
          {"calls_queued", s.calls_queued},
          {"models", std::move(models)}};
}

}  // namespace gateway::console
