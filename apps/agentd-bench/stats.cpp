#include "stats.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace agentd::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * values.size()));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  return values[rank - 1];
}

double Series::median() const {
  if (samples.empty()) return 0;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Series::min() const { return samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end()); }
double Series::max() const { return samples.empty() ? 0 : *std::max_element(samples.begin(), samples.end()); }

double Series::spread_percent() const {
  double m = median();
  if (samples.size() < 2 || m == 0) return 0;
  return (max() - min()) / 2 / std::abs(m) * 100;
}

std::optional<double> Row::ratio() const {
  if (agentd.empty() || baseline.empty()) return std::nullopt;
  double a = agentd.median(), b = baseline.median();
  double num = ratio_inverted ? b : a, den = ratio_inverted ? a : b;
  if (den == 0) return std::nullopt;
  return num / den;
}

std::optional<bool> Row::pass() const {
  if (agentd.empty()) return std::nullopt;
  double v = agentd.median();
  switch (target.kind) {
    case Target::Kind::none:
      return std::nullopt;
    case Target::Kind::ratio_at_most:
      if (auto r = ratio()) return *r <= target.bound;
      return std::nullopt;
    case Target::Kind::ratio_at_least:
      if (auto r = ratio()) return *r >= target.bound;
      return std::nullopt;
    case Target::Kind::value_at_most:
      return v <= target.bound;
    case Target::Kind::value_at_least:
      return v >= target.bound;
  }
  return std::nullopt;
}

namespace {

std::string number(double v) {
  double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1e7) return fmt::format("{:.3g}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3g}", v);
}

std::string cell(const Series& s) {
  if (s.empty()) return "-";
  std::string out = number(s.median());
  if (s.samples.size() > 1) out += fmt::format(" ±{:.0f}%", s.spread_percent());
  return out;
}

nlohmann::json series_json(const Series& s) {
  if (s.empty()) return nullptr;
  return {{"median", s.median()},
          {"min", s.min()},
          {"max", s.max()},
          {"spread_percent", s.spread_percent()},
          {"samples", s.samples}};
}

}  // namespace

std::string render_columns(const std::vector<std::vector<std::string>>& cells) {
  if (cells.empty()) return {};
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  std::string out;
  for (std::size_t k = 0; k < cells.size(); ++k) {
    std::string line;
    for (std::size_t i = 0; i < cells[k].size() && i < width.size(); ++i)
      line += fmt::format("{:<{}}", cells[k][i], width[i] + (i + 1 < cells[k].size() ? 2 : 0));
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    if (k == 0) {
      std::size_t total = 0;
      for (auto w : width) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  return out;
}

std::string Report::table() const {
  std::vector<std::vector<std::string>> cells;
  cells.push_back({"workload", "metric", "unit", "agentd", "baseline", "ratio", "target", "result"});
  for (const auto& r : rows) {
    std::string base = cell(r.baseline);
    if (!r.baseline.empty() && !r.baseline_name.empty()) base += " (" + r.baseline_name + ")";
    auto ratio = r.ratio();
    auto pass = judged ? r.pass() : std::nullopt;
    cells.push_back({r.workload, r.metric, r.unit, cell(r.agentd), base,
                     ratio ? fmt::format("{:.2f}x", *ratio) : "-",
                     r.target.text.empty() ? "-" : r.target.text,
                     pass ? (*pass ? "PASS" : "FAIL") : (judged || !r.pass() ? "-" : "not judged")});
  }
  std::string out = render_columns(cells);
  for (const auto& r : rows)
    if (!r.note.empty()) out += fmt::format("  {} {}: {}\n", r.workload, r.metric, r.note);
  for (const auto& s : skipped) out += "  skipped " + s + "\n";
  if (!judged)
    out +=
        "  --quick: a smoke run; its sizes are too small to judge the targets (run without "
        "--quick to judge them)\n";
  return out;
}

std::string Report::json() const {
  nlohmann::json j;
  j["command"] = command;
  j["environment"] = environment;
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    auto ratio = r.ratio();
    auto pass = judged ? r.pass() : std::nullopt;
    j["rows"].push_back({{"workload", r.workload},
                         {"metric", r.metric},
                         {"unit", r.unit},
                         {"agentd", series_json(r.agentd)},
                         {"baseline", series_json(r.baseline)},
                         {"baseline_name", r.baseline_name},
                         {"ratio", ratio ? nlohmann::json(*ratio) : nlohmann::json(nullptr)},
                         {"ratio_is", r.ratio_inverted ? "baseline/agentd" : "agentd/baseline"},
                         {"target", r.target.text},
                         {"pass", pass ? nlohmann::json(*pass) : nlohmann::json(nullptr)},
                         {"note", r.note}});
  }
  j["skipped"] = skipped;
  j["judged"] = judged;
  return j.dump(2) + "\n";
}

}  // namespace agentd::bench
