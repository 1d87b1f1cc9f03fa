# The collective watchdog and straggler monitoring from the command line: a rank that hangs
# outside any collective stops the job within seconds of --collective-timeout, named, with
# flight.json in the run directory; --slow-rank makes a straggler that the summary names.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

# Rank 1 sleeps 600 s before step 2: the watchdog fires after 1 s and the job ends a few seconds
# later (the launcher does not wait for a rank stuck outside collectives).
string(TIMESTAMP t0 "%s")
expect_error(hang "rank 0: collective watchdog: .*step 2 .* rank 1 did not arrive"
             train --model tiny --ranks 2 --steps 4 --collective-timeout 1 --hang-rank 1:2:600
                   --run-dir ${WORK_DIR}/hang --overwrite)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
if(took GREATER 40)
  message(FATAL_ERROR "hang: the job took ${took} s to stop (timeout 1 s)")
endif()
if(NOT EXISTS ${WORK_DIR}/hang/flight.json)
  message(FATAL_ERROR "hang: no flight.json in the run directory")
endif()
file(READ ${WORK_DIR}/hang/flight.json flight)
if(NOT flight MATCHES "\"reason\": \"collective watchdog" OR NOT flight MATCHES "\"rank\": 1")
  message(FATAL_ERROR "hang: flight.json lacks the reason or rank 1:\n${flight}")
endif()
message(STATUS "hang: stopped after ${took} s, flight.json written")

# A straggler on demand: rank 1 computes 10x slower, rank 0 waits for it in every step.
run_ok(out train --model tiny --ranks 2 --steps 6 --slow-rank 1:10 --run-dir ${WORK_DIR}/slow
           --overwrite)
if(NOT out MATCHES "straggler: rank 1; the others waited [0-9.]+ ms per step longer than it"
   OR NOT out MATCHES "rank 1's lead by step \\(step:\\+X ms: [^)]*\\): 2:\\+[0-9.]+ms")
  message(FATAL_ERROR "slow: the run's summary does not name rank 1 the straggler:\n${out}")
endif()
run_ok(sum summary ${WORK_DIR}/slow)
if(NOT sum MATCHES "waiting for other ranks \\(exact" OR NOT sum MATCHES "straggler: rank 1;")
  message(FATAL_ERROR "slow: `shardlab summary` does not show the waits:\n${sum}")
endif()

# Bad values name the option.
expect_error(slow_form "--slow-rank '1x': expected RANK:FACTOR"
             train --model tiny --steps 1 --slow-rank 1x)
expect_error(slow_factor "--slow-rank '1:0.5': the factor must be in \\[1, 1000\\]"
             train --model tiny --steps 1 --slow-rank 1:0.5)
expect_error(slow_rank_outside "--slow-rank: rank 5 is not one of the 2 ranks"
             train --model tiny --steps 1 --ranks 2 --slow-rank 5:2)
expect_error(hang_form "--hang-rank '1:2': expected RANK:STEP:SECONDS"
             train --model tiny --steps 1 --hang-rank 1:2)
expect_error(timeout_zero "--collective-timeout 0: must be a number of seconds"
             train --model tiny --steps 1 --collective-timeout 0)
