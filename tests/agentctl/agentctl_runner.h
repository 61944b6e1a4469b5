// Runs the real agentctl binary for the CLI tests and normalises what varies between runs.
#pragma once

#include "server_process.h"  // agentd::test::ExitResult

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace agentd::test {

inline std::string agentctl_path() { return AGENTD_AGENTCTL_PATH; }

// Runs agentctl with args (and env added to ours) to its end; kills it and throws after timeout.
ExitResult run_agentctl(const std::vector<std::string>& args,
                        const std::map<std::string, std::string>& env = {},
                        std::chrono::milliseconds timeout = std::chrono::seconds(60));

// The command line as a shell would take it (single-quoted where needed), for transcripts.
std::string shell_line(const std::vector<std::string>& args);

// Replaces each key of exact by its value, then 32-hex ids by <ID>, "YYYY-MM-DD HH:MM:SS" by
// <TIME>, and "1.234 ms" by "<N> ms".
std::string normalise(std::string text, const std::vector<std::pair<std::string, std::string>>& exact);

// Compares actual with the golden file golden_dir/name; with $AGENTD_UPDATE_GOLDEN=1 rewrites
// it instead. Returns an empty string when they match, else a message naming both files.
std::string check_golden(const std::string& name, const std::string& actual);

}  // namespace agentd::test
