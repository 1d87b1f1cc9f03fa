# The quick benchmark suite as a test (ctest entry bench.quick): runs bench/run_bench.sh quick,
# then checks that every JSON file parses and holds the expected benchmarks, without errors, with
# their counters; and, when /usr/bin/python3 has matplotlib, that the report and its plots exist
# (PNG < 200 KB). Timings and figures are not asserted: benchmarks measure, tests assert.
#   cmake -DBIN_DIR=build/bin -DSOURCE_DIR=. -DWORK_DIR=build/bench/quick -P bench/quick_check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v BIN_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "bench.quick: pass -D${v}=...")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

execute_process(COMMAND /usr/bin/python3 -c "import matplotlib" RESULT_VARIABLE no_mpl
                OUTPUT_QUIET ERROR_QUIET)
set(report_flag)
if(no_mpl)
  message(STATUS "bench.quick: /usr/bin/python3 has no matplotlib: checking the JSON only "
                 "(install python3-matplotlib to check the report too)")
  set(report_flag --no-report)
endif()

execute_process(COMMAND bash ${SOURCE_DIR}/bench/run_bench.sh quick ${BIN_DIR} ${WORK_DIR}
                        ${report_flag}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench.quick: run_bench.sh quick failed (${rc}):\n${out}\n${err}")
endif()

# Reads DATA_DIR/<suite>.json into `doc` and the names of its benchmarks into `names`; fails on
# a file that does not parse and on any benchmark that reported an error.
function(read_suite suite)
  set(path ${WORK_DIR}/data/${suite}.json)
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "bench.quick: ${path} was not written")
  endif()
  file(READ ${path} json)
  string(JSON n ERROR_VARIABLE e LENGTH "${json}" benchmarks)
  if(e)
    message(FATAL_ERROR "bench.quick: ${path}: not Google Benchmark JSON: ${e}")
  endif()
  set(names)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${json}" benchmarks ${i} run_name)
    string(JSON failed ERROR_VARIABLE e GET "${json}" benchmarks ${i} error_occurred)
    if(NOT e AND failed)
      string(JSON msg GET "${json}" benchmarks ${i} error_message)
      message(FATAL_ERROR "bench.quick: ${suite}: ${name} failed: ${msg}")
    endif()
    list(APPEND names "${name}")
  endforeach()
  set(doc "${json}" PARENT_SCOPE)
  set(names "${names}" PARENT_SCOPE)
endfunction()

# Fails unless benchmark `name` of `doc` exists and has every counter in ARGN, each a number > 0
# when listed in `positive`.
function(expect_benchmark suite name positive)
  list(FIND names "${name}" i)
  if(i LESS 0)
    message(FATAL_ERROR "bench.quick: ${suite}: no benchmark ${name}; found:\n${names}")
  endif()
  foreach(c ${ARGN})
    string(JSON v ERROR_VARIABLE e GET "${doc}" benchmarks ${i} ${c})
    if(e)
      message(FATAL_ERROR "bench.quick: ${suite}: ${name} has no counter '${c}'")
    endif()
    if(NOT v MATCHES "^-?[0-9.]+([eE][-+]?[0-9]+)?$")
      message(FATAL_ERROR "bench.quick: ${suite}: ${name}: counter ${c} = '${v}' is not a number")
    endif()
    list(FIND positive "${c}" p)
    if(p GREATER_EQUAL 0 AND NOT v GREATER 0)
      message(FATAL_ERROR "bench.quick: ${suite}: ${name}: counter ${c} = ${v}, expected > 0")
    endif()
  endforeach()
endfunction()

# ---- training step: every strategy at 1, 2, 4 ranks; prefetch on and off where it applies
read_suite(train_step)
set(train_counters tokens/s step_ms peak persistent formula planned_peak comm_bytes comm_buffer
    comm_share
    exposed_share params peak_params peak_params_unsharded peak_grads peak_grads_unsharded
    peak_optimizer_state peak_activations peak_comm_buffers peak_workspace)
set(checked 0)
foreach(s no_shard shard_optim shard_grad_op full_shard hybrid_shard)
  set(prefetch 1)
  if(s STREQUAL "full_shard" OR s STREQUAL "hybrid_shard")
    set(prefetch 1 0)
  endif()
  foreach(n 1 2 4)
    set(g 2)
    if(n EQUAL 1)
      set(g 1)
    endif()
    foreach(pf ${prefetch})
      set(args "ranks:${n}/prefetch:${pf}/batch:4/seq:64/group:${g}")
      expect_benchmark(train_step "train_step/local/${s}/tiny/${args}/process_time/manual_time"
        "tokens/s;step_ms;peak;persistent;formula;planned_peak;params;peak_params;peak_activations"
        ${train_counters})
      math(EXPR checked "${checked} + 1")
    endforeach()
  endforeach()
endforeach()
list(LENGTH names found)
if(NOT found EQUAL checked)
  message(FATAL_ERROR "bench.quick: train_step: ${found} benchmarks, expected ${checked}")
endif()

# ---- collectives: the table's four rows at 1 MiB and 64 MiB on 2 and 4 local ranks, each with
# its alternated memcpy; memcpy
read_suite(collectives)
foreach(op all_gather reduce_scatter all_reduce broadcast)
  foreach(bytes 1048576 67108864)
    foreach(n 2 4)
      set(match ${names})
      list(FILTER match INCLUDE REGEX "^${op}/local/bytes:${bytes}/ranks:${n}/")
      list(LENGTH match k)
      if(NOT k EQUAL 1)
        message(FATAL_ERROR "bench.quick: collectives: no ${op}/local/bytes:${bytes}/ranks:${n}")
      endif()
      # run_bench.sh quick passes --memcpy_rounds: each row carries its paired memcpy reference
      expect_benchmark(collectives "${match}" "time;algbw;busbw;bytes;memcpy_bw;memcpy_frac"
                       time algbw busbw bytes memcpy_bw memcpy_frac)
    endforeach()
  endforeach()
endforeach()
set(match ${names})
list(FILTER match INCLUDE REGEX "^memcpy/")
if(NOT match)
  message(FATAL_ERROR "bench.quick: collectives: no memcpy benchmark; found:\n${names}")
endif()
foreach(m ${match})
  expect_benchmark(collectives "${m}" "bw" bw)
endforeach()

# ---- capacity: every strategy at 1, 2, 4 ranks under 16 MiB, width 128
read_suite(capacity)
foreach(s no_shard shard_optim shard_grad_op full_shard hybrid_shard)
  foreach(n 1 2 4)
    expect_benchmark(capacity
                     "capacity/${s}/ranks:${n}/limit_MiB:16/width:128/iterations:1/manual_time"
                     "max_layers;planned_layers;params;peak;limit;trials"
                     max_layers planned_layers params peak limit trials)
  endforeach()
endforeach()

# ---- wrap policies: tiny at N = 2 under block, whole and layer, each with its counters
read_suite(wrap)
foreach(w block whole layer)
  expect_benchmark(wrap "wrap/local/full_shard/tiny/${w}/ranks:2/process_time/manual_time"
                   "tokens/s;step_ms;collectives;units;peak;peak_params_unsharded"
                   tokens/s step_ms collectives units largest_unit peak peak_params_unsharded
                   planned_peak exposed_ms)
endforeach()

# ---- the report
if(NOT no_mpl)
  set(report ${WORK_DIR}/report.md)
  if(NOT EXISTS ${report})
    message(FATAL_ERROR "bench.quick: report.py did not write ${report}")
  endif()
  file(READ ${report} text)
  foreach(section "## Machine and run" "## Headlines" "## Training step" "## Collectives"
                  "## Capacity" "## Wrap policy")
    string(FIND "${text}" "${section}" at)
    if(at LESS 0)
      message(FATAL_ERROR "bench.quick: ${report} has no '${section}' section")
    endif()
  endforeach()
  file(GLOB pngs ${WORK_DIR}/*.png)
  list(LENGTH pngs k)
  if(k LESS 4)
    message(FATAL_ERROR "bench.quick: expected at least 4 plots in ${WORK_DIR}, found ${k}")
  endif()
  foreach(png ${pngs})
    file(SIZE ${png} size)
    if(size GREATER 204800)
      message(FATAL_ERROR "bench.quick: ${png} is ${size} bytes (over 200 KB)")
    endif()
  endforeach()
endif()
message(STATUS "bench.quick: JSON of the four suites as expected")
