#include "call_stats.h"

#include "mailbox.h"

#include <agentd/client.h>

#include <algorithm>
#include <string_view>
#include <variant>

namespace agentd::detail {

void LatencyHistogram::observe(double seconds) {
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets[i];
      break;
    }
  }
  ++count;
  sum += seconds;
}

namespace {

constexpr std::string_view kCutMark = "\u2026";  // "…", 3 bytes

// Appends text to out (at most max bytes, as out is): when it does not fit, as much as fits
// before a "…" that marks the cut, cut at a UTF-8 character boundary. False once cut.
bool append_cut(std::string& out, std::string_view text, std::size_t max) {
  if (out.size() + text.size() <= max) {
    out.append(text);
    return true;
  }
  out.append(text.substr(0, max + 1));  // past max: the cut below is inside what is there
  std::size_t n = max - kCutMark.size();
  while (n > 0 && (static_cast<unsigned char>(out[n]) & 0xC0) == 0x80) --n;
  out.resize(n);
  out.append(kCutMark);
  return false;
}

// The JSON string literal of s's first bytes (at most max, at a character boundary); bytes
// that are not UTF-8 become U+FFFD instead of throwing.
std::string quoted_prefix(const std::string& s, std::size_t max) {
  std::size_t n = std::min(s.size(), max);
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return Value(s.substr(0, n)).dump(-1, ' ', false, Value::error_handler_t::replace);
}

// v's JSON text appended to out, cut at max bytes, without writing out a big value first.
// False once cut.
bool append_preview(std::string& out, const Value& v, std::size_t max) {
  if (v.is_string()) return append_cut(out, quoted_prefix(v.get_ref<const std::string&>(), max), max);
  if (!v.is_array() && !v.is_object())
    return append_cut(out, v.dump(-1, ' ', false, Value::error_handler_t::replace), max);
  if (!append_cut(out, v.is_array() ? "[" : "{", max)) return false;
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first && !append_cut(out, ",", max)) return false;
    first = false;
    if (v.is_object() && (!append_cut(out, quoted_prefix(it.key(), max), max) || !append_cut(out, ":", max)))
      return false;
    if (!append_preview(out, it.value(), max)) return false;
  }
  return append_cut(out, v.is_array() ? "]" : "}", max);
}

// m's content, cut, into out (its memory reused: a span's slot in the ring is filled in place).
void preview_into(std::string& out, const Msg& m) {
  out.clear();
  if (m.content.is_string())
    append_cut(out, m.content.get_ref<const std::string&>(), TraceSpan::kSpanPreviewBytes);
  else if (!m.content.is_null())
    append_preview(out, m.content, TraceSpan::kSpanPreviewBytes);
}

}  // namespace

void CallStats::finished(const AgentSlot& slot, const Call& call,
                         std::chrono::steady_clock::time_point finished, SpanRecord* span_out) {
  using std::chrono::duration_cast;
  using std::chrono::nanoseconds;
  const std::chrono::duration<double> run_time = finished - call.started;
  // A read of the agent's memory keeps its span but is not counted as one of the server's calls:
  // the counts (and rates, and latency) are of agent work, not of who looked at an agent.
  if (!reads_only(call)) count(slot.class_name, !call.out_error, run_time.count());
  // Every field is assigned: the slot may hold an older span, whose strings' memory is reused.
  SpanRecord& s = next_span();
  s.call_id = call.call_id;
  s.agent_id = slot.id;
  s.agent_class = slot.class_name;
  s.kind = kind_name(call.kind);
  s.method = call.method;
  s.consumed = call.consumed;
  s.enqueued_unix_ns = duration_cast<nanoseconds>(call.enqueued_wall.time_since_epoch()).count();
  s.queue_wait_ns =
      std::max<std::int64_t>(0, duration_cast<nanoseconds>(call.started - call.enqueued).count());
  s.run_ns = duration_cast<nanoseconds>(finished - call.started).count();
  s.model_calls = call.model_calls;
  s.prompt_tokens = call.prompt_tokens;
  s.completion_tokens = call.completion_tokens;
  s.trace_id = call.trace_id;
  s.tool_calls = call.tool_calls;
  const Msg* in = call.input ? std::get_if<Msg>(call.input.get()) : nullptr;
  if (in != nullptr)
    preview_into(s.input, *in);
  else
    s.input.clear();
  if (call.out_msg)
    preview_into(s.output, *call.out_msg);
  else
    s.output.clear();
  if (call.out_error) {
    s.outcome = to_string(call.out_error->code());
    s.error_message = call.out_error->message();
  } else {
    s.outcome = "ok";
    s.error_message.clear();
  }
  if (span_out != nullptr) *span_out = s;
}

void CallStats::failed_without_running(const std::string& class_name) {
  ++failed_;
  ++by_class_[class_name.empty() ? "(none)" : class_name].second;
}

const SpanRecord& CallStats::record(const std::string& class_name, bool ok, double run_seconds,
                                    SpanRecord span, bool counted) {
  if (counted) count(class_name, ok, run_seconds);
  SpanRecord& slot = next_span();
  const std::uint64_t seq = slot.seq;
  slot = std::move(span);
  slot.seq = seq;
  return slot;
}

void CallStats::count(const std::string& class_name, bool ok, double run_seconds) {
  auto& counts = by_class_[class_name];
  if (ok) {
    ++completed_;
    ++counts.first;
  } else {
    ++failed_;
    ++counts.second;
  }
  latency_.observe(run_seconds);
}

SpanRecord& CallStats::next_span() {
  ++span_seq_;
  if (spans_.size() < max_spans_) {
    spans_.emplace_back();
    spans_.back().seq = span_seq_;
    return spans_.back();
  }
  SpanRecord& slot = spans_[(span_seq_ - 1) % max_spans_];
  slot.seq = span_seq_;
  return slot;
}

std::vector<SpanRecord> CallStats::recent_spans(std::size_t limit) const {
  std::size_t n = spans_.size();
  if (limit != 0 && limit < n) n = limit;
  std::vector<SpanRecord> out;
  out.reserve(n);
  // The ring holds seqs span_seq_ - spans_.size() + 1 .. span_seq_ at index (seq - 1) % size.
  for (std::uint64_t seq = span_seq_ - n + 1; seq <= span_seq_; ++seq)
    out.push_back(spans_[(seq - 1) % max_spans_]);
  return out;
}

}  // namespace agentd::detail
