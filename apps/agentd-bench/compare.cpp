#include "compare.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace agentd::bench {

namespace {

std::optional<double> median_of(const nlohmann::json& series) {
  if (!series.is_object() || !series.contains("median") || !series["median"].is_number()) return std::nullopt;
  return series["median"].get<double>();
}

std::string figure(std::optional<double> v) {
  if (!v) return "-";
  double a = std::abs(*v);
  if (a >= 100) return fmt::format("{:.0f}", *v);
  if (a >= 10) return fmt::format("{:.1f}", *v);
  return fmt::format("{:.3g}", *v);
}

std::string ratio_text(std::optional<double> r) { return r ? fmt::format("{:.2f}x", *r) : "-"; }

}  // namespace

OldRun read_old_run(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("--compare {}: cannot read the file", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format(
        "--compare {}: not JSON ({}); give a file written by agentd-bench --json", path, e.what()));
  }
  if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array())
    throw std::runtime_error(
        fmt::format("--compare {}: no \"rows\" array; give a file written by agentd-bench --json", path));
  OldRun out;
  out.path = path;
  if (j.contains("command") && j["command"].is_string()) out.command = j["command"].get<std::string>();
  if (j.contains("judged") && j["judged"].is_boolean()) out.judged = j["judged"].get<bool>();
  std::size_t index = 0;
  for (const auto& r : j["rows"]) {
    auto text = [&](const char* key) -> std::string {
      if (!r.is_object() || !r.contains(key) || !r[key].is_string())
        throw std::runtime_error(
            fmt::format("--compare {}: rows[{}] has no string \"{}\"; give a file written by "
                        "agentd-bench --json",
                        path, index, key));
      return r[key].get<std::string>();
    };
    OldRow row;
    row.workload = text("workload");
    row.metric = text("metric");
    row.unit = text("unit");
    auto agentd = r.contains("agentd") ? median_of(r["agentd"]) : std::nullopt;
    if (!agentd)
      throw std::runtime_error(fmt::format("--compare {}: rows[{}] ({} {}) has no agentd median", path, index,
                                           row.workload, row.metric));
    row.agentd = *agentd;
    if (r.contains("baseline")) row.baseline = median_of(r["baseline"]);
    if (r.contains("ratio") && r["ratio"].is_number()) row.ratio = r["ratio"].get<double>();
    out.rows.push_back(std::move(row));
    ++index;
  }
  return out;
}

bool higher_is_better(const Row& row) {
  using K = Target::Kind;
  switch (row.target.kind) {
    case K::value_at_least:
      return true;
    case K::value_at_most:
      return false;
    case K::ratio_at_least:
      return !row.ratio_inverted;  // an inverted ratio (baseline / agentd) grows as agentd shrinks
    case K::ratio_at_most:
      return row.ratio_inverted;
    case K::none:
      break;
  }
  const std::string& u = row.unit;
  return (u.size() > 2 && u.compare(u.size() - 2, 2, "/s") == 0) || u == "streams" || u == "calls";
}

Comparison compare_runs(const OldRun& old_run, const Report& now) {
  Comparison c;
  c.old_path = old_run.path;
  c.old_command = old_run.command;
  c.old_judged = old_run.judged;
  c.new_judged = now.judged;
  std::map<std::pair<std::string, std::string>, const OldRow*> old_rows;
  for (const auto& r : old_run.rows) old_rows.emplace(std::make_pair(r.workload, r.metric), &r);
  std::map<std::pair<std::string, std::string>, bool> seen;
  for (const auto& row : now.rows) {
    Comparison::Line line;
    line.workload = row.workload;
    line.metric = row.metric;
    line.unit = row.unit;
    if (!row.agentd.empty()) line.new_value = row.agentd.median();
    line.new_ratio = row.ratio();
    auto it = old_rows.find({row.workload, row.metric});
    if (it == old_rows.end()) {
      line.verdict = "only in this run";
    } else {
      seen[it->first] = true;
      const OldRow& o = *it->second;
      line.old_value = o.agentd;
      line.old_ratio = o.ratio;
      if (o.unit != row.unit) {
        line.verdict = fmt::format("not comparable (unit was {})", o.unit);
      } else if (line.new_value && o.agentd != 0) {
        line.change = *line.new_value / o.agentd;
        const double change = *line.change;
        const bool up = change > 1 + kCompareTolerance, down = change < 1 - kCompareTolerance;
        if (!up && !down) {
          line.verdict = "same";
        } else if (up == higher_is_better(row)) {
          line.verdict = "better";
          ++c.better;
        } else {
          line.verdict = "worse";
          ++c.worse;
        }
      } else if (!line.new_value) {
        line.verdict = "no figure in this run";
      } else {
        line.verdict = *line.new_value == 0 ? "same" : "not comparable (OLD was 0)";
      }
    }
    c.lines.push_back(std::move(line));
  }
  for (const auto& o : old_run.rows) {
    if (seen.count({o.workload, o.metric})) continue;
    Comparison::Line line;
    line.workload = o.workload;
    line.metric = o.metric;
    line.unit = o.unit;
    line.old_value = o.agentd;
    line.old_ratio = o.ratio;
    line.verdict = "only in OLD";
    c.lines.push_back(std::move(line));
  }
  return c;
}

std::string Comparison::table() const {
  std::vector<std::vector<std::string>> cells;
  cells.push_back(
      {"workload", "metric", "unit", "OLD", "this run", "this/OLD", "OLD ratio", "ratio", "verdict"});
  for (const auto& l : lines)
    cells.push_back({l.workload, l.metric, l.unit, figure(l.old_value), figure(l.new_value),
                     ratio_text(l.change), ratio_text(l.old_ratio), ratio_text(l.new_ratio),
                     l.verdict == "worse" || l.verdict == "better"
                         ? fmt::format("{} ({:+.0f}%)", l.verdict, (*l.change - 1) * 100)
                         : l.verdict});
  std::string out = fmt::format("compared with {}{}\n", old_path,
                                old_command.empty() ? "" : fmt::format(" ({})", old_command));
  out += render_columns(cells);
  out += fmt::format(
      "  {} row(s) worse and {} better by more than {:.0f}% (this/OLD is this run's agentd median over "
      "OLD's; ratio is each run's agentd vs its own baseline, the steadier figure on a shared "
      "machine)\n",
      worse, better, kCompareTolerance * 100);
  if (old_judged != new_judged)
    out += fmt::format("  {} was a --quick run and {} not: their sizes differ, so do the figures\n",
                       old_judged ? "this run" : "OLD", old_judged ? "OLD" : "this run");
  return out;
}

std::string Comparison::add_to_json(const std::string& report_json) const {
  nlohmann::json j = nlohmann::json::parse(report_json);
  auto opt = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& l : lines)
    rows.push_back({{"workload", l.workload},
                    {"metric", l.metric},
                    {"unit", l.unit},
                    {"old", opt(l.old_value)},
                    {"new", opt(l.new_value)},
                    {"change", opt(l.change)},
                    {"old_ratio", opt(l.old_ratio)},
                    {"ratio", opt(l.new_ratio)},
                    {"verdict", l.verdict}});
  j["compare"] = {{"old", old_path}, {"old_command", old_command}, {"tolerance", kCompareTolerance},
                  {"worse", worse},  {"better", better},           {"rows", rows}};
  return j.dump(2) + "\n";
}

}  // namespace agentd::bench
