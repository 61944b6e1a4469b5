// The standard workloads of agentd-bench (W1..W16; W8 is the simulation over several servers), each run
// `repeat` times and added to the report as rows beside their baselines. One file per workload in workloads/;
// main() holds the table that runs them in order.
#pragma once

#include "config.h"
#include "deployment.h"
#include "stats.h"

namespace agentd::bench {

void run_w1(const Config& cfg, Deployment& dep, Report& report);
void run_w2(const Config& cfg, Deployment& dep, Report& report);
void run_w3(const Config& cfg, Deployment& dep, Report& report);
void run_w4(const Config& cfg, Deployment& dep, Report& report);
void run_w5(const Config& cfg, Deployment& dep, Report& report);
void run_w6(const Config& cfg, Deployment& dep, Report& report);
void run_w7(const Config& cfg, Deployment& dep, Report& report);
void run_w8(const Config& cfg, Deployment& dep, Report& report);
void run_w9(const Config& cfg, Deployment& dep, Report& report);
void run_w10(const Config& cfg, Deployment& dep, Report& report);
void run_w11(const Config& cfg, Deployment& dep, Report& report);
void run_w12(const Config& cfg, Deployment& dep, Report& report);
void run_w13(const Config& cfg, Deployment& dep, Report& report);  // agents written in Python
void run_w14(const Config& cfg, Deployment& dep, Report& report);  // agentd-gateway (HTTP)
void run_w15(const Config& cfg, Deployment& dep, Report& report);  // the console's cost to a server
void run_w16(const Config& cfg, Deployment& dep, Report& report);  // MCP tool calls (stdio)

}  // namespace agentd::bench
