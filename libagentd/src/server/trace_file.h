// --trace-file: appends each finished call's span as one OpenTelemetry-style JSON line.
#pragma once

#include "span_record.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace agentd::detail {

// The span as one JSON object (no newline): traceId, spanId, name "agentd.call",
// startTimeUnixNano, endTimeUnixNano, attributes (agentd.*), status, links to the spans of the
// placeholders it consumed. Ids are derived from call ids, so a consumer's link names its
// producer's span.
std::string span_json_line(const SpanRecord& span, const std::string& server_id);

class TraceFile {
 public:
  // Opens path for appending; throws Error(config_error) when it cannot.
  TraceFile(const std::string& path, std::string server_id);
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Any thread: one line, flushed.
  void write(const SpanRecord& span);

 private:
  std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string server_id_;
  bool failed_ = false;  // a write failed (logged once)
};

}  // namespace agentd::detail
