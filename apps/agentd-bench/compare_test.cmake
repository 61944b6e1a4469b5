# agentd-bench --compare: a previous run's figures beside this run's.
# cmake -DBENCH=<agentd-bench> -DAS_SERVER=<as_server> -DWORK=<scratch dir> -P compare_test.cmake
# OLD.json is written here with figures no real run can reach, so the verdicts are known: a
# p50 of 0.001 us (this run is worse), a ping p50 of 10^9 us (this run is better), and a row
# this run does not have.
set(ENV{AGENTD_AS_SERVER} "${AS_SERVER}")
file(MAKE_DIRECTORY "${WORK}")
set(old "${WORK}/old.json")
file(WRITE "${old}" [=[{
  "command": "agentd-bench --workloads W1 (the compare test's OLD)",
  "judged": false,
  "rows": [
    {"workload": "W1", "metric": "reply().get() p50", "unit": "us",
     "agentd": {"median": 0.001}, "baseline": {"median": 0.001}, "ratio": 1.0},
    {"workload": "W1", "metric": "call(\"ping\") p50", "unit": "us",
     "agentd": {"median": 1000000000}, "baseline": null, "ratio": null},
    {"workload": "W99", "metric": "a row of an older bench", "unit": "us",
     "agentd": {"median": 5}}
  ]
}
]=])

function(expect_in haystack needle what)
  string(FIND "${haystack}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: no '${needle}' in:\n${haystack}")
  endif()
endfunction()

execute_process(
  COMMAND ${BENCH} --workloads W1 --quick --calls 50 --compare "${old}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agentd-bench --compare exited with ${rc}:\n${err}")
endif()
expect_in("${out}" "compared with ${old}" "the comparison's heading")
string(REGEX MATCH "W1 +reply\\(\\)\\.get\\(\\) p50 +us +0\\.001 +[0-9.]+ +[0-9.]+x +1\\.00x +[0-9.]+x +worse \\(\\+[0-9]+%\\)" worse "${out}")
if(NOT worse)
  message(FATAL_ERROR "the reply p50 of 0.001 us in OLD is not compared as worse")
endif()
string(REGEX MATCH "W1 +call\\(\"ping\"\\) p50 +us +1000000000 +[0-9.]+ +[0-9.]+x +- +[0-9.]+x +better \\(-[0-9]+%\\)" better "${out}")
if(NOT better)
  message(FATAL_ERROR "the ping p50 of 10^9 us in OLD is not compared as better")
endif()
string(REGEX MATCH "W99 +a row of an older bench +us +5 +- +- +- +- +only in OLD" gone "${out}")
if(NOT gone)
  message(FATAL_ERROR "the row only OLD has is not listed as such")
endif()
expect_in("${out}" "only in this run" "rows OLD lacks")
expect_in("${out}" "1 row(s) worse and 1 better by more than 5%" "the summary")

# --json carries the comparison as its "compare" member.
execute_process(
  COMMAND ${BENCH} --workloads W1 --quick --calls 50 --compare "${old}" --json
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agentd-bench --compare --json exited with ${rc}:\n${err}")
endif()
string(JSON worse_count GET "${out}" compare worse)
if(NOT worse_count EQUAL 1)
  message(FATAL_ERROR "--json compare.worse is ${worse_count}, not 1:\n${out}")
endif()

# A file that is not a bench's JSON is refused before anything runs, naming it.
file(WRITE "${WORK}/bad.json" "{\"rows\": [{\"workload\": \"W1\"}]}")
execute_process(
  COMMAND ${BENCH} --workloads W1 --quick --compare "${WORK}/bad.json"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "a bad --compare file gave exit ${rc}, not 2")
endif()
expect_in("${err}" "bad.json: rows[0] has no string \"metric\"" "the bad file's error")
string(FIND "${err}" "repeat 1/1" ran)
if(NOT ran EQUAL -1)
  message(FATAL_ERROR "the bench ran before refusing the bad --compare file")
endif()
