// agentd-bench --compare OLD.json: a previous run's figures (its --json output) beside this run's,
// row by row, so that a change to the hot path is checked in one command.
#pragma once

#include "stats.h"

#include <optional>
#include <string>
#include <vector>

namespace agentd::bench {

// One metric of OLD.json, as the comparison needs it.
struct OldRow {
  std::string workload;
  std::string metric;
  std::string unit;
  double agentd = 0;               // median
  std::optional<double> baseline;  // median, when the row had one
  std::optional<double> ratio;
};

struct OldRun {
  std::string path;
  std::string command;
  bool judged = true;  // false: OLD was a --quick run
  std::vector<OldRow> rows;
};

// Reads and checks OLD.json (before the run, so a wrong path fails at once). Throws
// std::runtime_error naming the file and what is wrong with it.
OldRun read_old_run(const std::string& path);

// Within this much either way a row counts as unchanged: machines scatter (compare the same
// machine, idle, several repeats).
constexpr double kCompareTolerance = 0.05;

// Whether a larger figure of this row is the better one (rates, things that arrived); else
// smaller is better (times, bytes, CPU, threads).
bool higher_is_better(const Row& row);

struct Comparison {
  struct Line {
    std::string workload, metric, unit;
    std::optional<double> old_value, new_value;  // agentd medians
    std::optional<double> old_ratio, new_ratio;  // the rows' own ratios (agentd vs baseline)
    // new / old; > 1 is worse for a lower-is-better row. Empty when either side is missing.
    std::optional<double> change;
    // "better", "worse", "same", "only in OLD", "only in this run"
    std::string verdict;
  };
  std::string old_path, old_command;
  bool old_judged = true, new_judged = true;
  std::vector<Line> lines;
  int worse = 0;
  int better = 0;

  std::string table() const;
  // report_json (Report::json()) with this comparison added as its "compare" member.
  std::string add_to_json(const std::string& report_json) const;
};

Comparison compare_runs(const OldRun& old_run, const Report& now);

}  // namespace agentd::bench
