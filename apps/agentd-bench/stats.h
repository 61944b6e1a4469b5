// Results of agentd-bench: per-repeat samples, the rows of the table, and its two renderings
// (the human table and --json).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentd::bench {

// One figure measured once per repeat.
struct Series {
  std::vector<double> samples;

  void add(double v) { samples.push_back(v); }
  bool empty() const { return samples.empty(); }
  double median() const;
  double min() const;
  double max() const;
  // Half the range over the median, in percent: "±x%".
  double spread_percent() const;
};

// Rows of cells as left-aligned columns, a rule under the first (the heading).
std::string render_columns(const std::vector<std::vector<std::string>>& cells);

// Percentile (0..100) of unsorted values, nearest rank.
double percentile(std::vector<double> values, double p);

// How a row passes. The ratio is agentd / baseline, or baseline / agentd when inverted.
struct Target {
  enum class Kind { none, ratio_at_most, ratio_at_least, value_at_most, value_at_least };
  Kind kind = Kind::none;
  double bound = 0;
  std::string text;  // as printed, e.g. "<= 1.5x"
};

struct Row {
  Row(std::string w, std::string m, std::string u)
      : workload(std::move(w)), metric(std::move(m)), unit(std::move(u)) {}

  std::string workload;  // "W1"
  std::string metric;    // "reply().get() p50"
  std::string unit;      // "us", "replies/s", "s", "B", ...
  Series agentd;
  Series baseline;
  std::string baseline_name;    // "capnp echo"
  bool ratio_inverted = false;  // ratio = baseline / agentd (e.g. a speed-up)
  Target target;
  std::string note;

  std::optional<double> ratio() const;
  // Empty when the row has no target (informative).
  std::optional<bool> pass() const;
};

struct Report {
  std::string command;
  std::string environment;  // servers, build, machine
  std::vector<Row> rows;
  std::vector<std::string> skipped;  // "W6: needs two servers"
  // False for --quick runs: their sizes are too small to judge the targets, so rows show
  // "not judged" instead of PASS/FAIL (and "pass" is null in JSON, with "judged": false).
  bool judged = true;

  std::string table() const;
  std::string json() const;
};

}  // namespace agentd::bench
