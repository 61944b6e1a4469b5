# Runs agentd-bench with tiny sizes; fails unless it exits 0 and prints the result table.
# cmake -DBENCH=<agentd-bench> -DAS_SERVER=<as_server> [-DGATEWAY=<agentd-gateway>] -P smoke_test.cmake
# With GATEWAY, W14 (the HTTP gateway) runs too, and its rows must be there.
set(ENV{AGENTD_AS_SERVER} "${AS_SERVER}")
# W16 starts this agentd-bench as its MCP tool server (--serve-mcp-echo) under the child.
set(workloads W1,W2,W5,W6,W8,W9,W10,W11,W12,W16)
# --lane-spin reaches the clients: W1's lane_spin rows name it, and so does its polling baseline.
set(needles "lane_spin 50 us)" "polls up to lane_spin (50 us)" "workload" "W1" "W2" "W5" "W6" "W8" "W9" "W10" "W11" "W12" "W16" "tool call p50" "ratio" "target"
  "async agent reply().get() p50, single-thread client")
if(GATEWAY)
  set(ENV{AGENTD_GATEWAY} "${GATEWAY}")
  string(APPEND workloads ",W14")
  list(APPEND needles "gateway chat completion p50" "gateway completions/s" "streams delivered whole")
endif()
execute_process(
  COMMAND ${BENCH} --workloads ${workloads} --repeat 1 --quick --lane-spin 50
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agentd-bench exited with ${rc}:\n${err}")
endif()
# A spin past what a client allows is refused before anything runs, saying what is allowed.
execute_process(
  COMMAND ${BENCH} --workloads W1 --lane-spin 20000
  RESULT_VARIABLE bad_rc
  OUTPUT_VARIABLE bad_out
  ERROR_VARIABLE bad_err)
string(FIND "${bad_err}" "--lane-spin 20000: must be 0..10000 microseconds" at)
if(NOT bad_rc EQUAL 2 OR at EQUAL -1)
  message(FATAL_ERROR "agentd-bench --lane-spin 20000 exited with ${bad_rc}, saying:\n${bad_err}")
endif()
# A quick run judges nothing: no PASS/FAIL (a 2-core machine would show FAIL rows), and it says so.
foreach(word "PASS" "FAIL")
  string(FIND "${out}" "${word}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "agentd-bench --quick printed ${word}: quick runs are not judged")
  endif()
endforeach()
string(FIND "${out}" "too small to judge" at)
if(at EQUAL -1)
  message(FATAL_ERROR "agentd-bench --quick does not say that its rows are not judged")
endif()
foreach(needle IN LISTS needles)
  string(FIND "${out}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "agentd-bench output has no '${needle}' (no table?):\n${err}")
  endif()
endforeach()
