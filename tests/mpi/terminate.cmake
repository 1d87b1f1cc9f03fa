# A rank killed under mpirun (-np 3): rank 2's process kills itself (SIGKILL) before step 3, as a
# crash or the OOM killer would end it. mpirun then ends ranks 0 and 1 with SIGTERM. Each says on
# stderr what it was doing and adds itself to the run directory's flight.json, where rank 2 is
# missing (it is the one that died); the job exits non-zero within seconds. mpirun's SIGKILL
# follows its SIGTERM after odls_base_sigkill_timeout (1 s by default); on a loaded machine that
# can be too short, so the test gives the survivors 5 s, and requires every survivor in flight.json and at least one
# survivor's line on stderr (mpirun may stop forwarding a rank's output once it has decided to
# end the job). `shardlab summary` of the run then says how it ended.
# Run with -DMPIEXEC=... -DMPI_FLAGS=... -DSHARDLAB=... -DWORK_DIR=...
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(
  COMMAND ${MPIEXEC} -np 3 ${MPI_FLAGS} --mca odls_base_sigkill_timeout 5 ${SHARDLAB} train --backend mpi --model tiny --steps 6 --batch 12
          --kill-rank 2:3 --run-dir ${WORK_DIR}/run
  WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT 120)
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0\n${out}${err}")
endif()
if(NOT err MATCHES "shardlab: rank [01]: terminated by SIGTERM [^\n]* while (waiting in #[0-9]+|busy outside collectives since #[0-9]+)")
  message(FATAL_ERROR "no rank said what it was doing:\n${out}${err}")
endif()
if(NOT EXISTS ${WORK_DIR}/run/flight.json)
  message(FATAL_ERROR "no flight.json\n${err}")
endif()
file(READ ${WORK_DIR}/run/flight.json flight)
string(JSON n LENGTH "${flight}" ranks)
set(seen "")
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  string(JSON r GET "${flight}" ranks ${i} rank)
  string(JSON by GET "${flight}" ranks ${i} terminated_by)
  if(NOT by STREQUAL "SIGTERM")
    message(FATAL_ERROR "rank ${r} of flight.json was not terminated by SIGTERM:\n${flight}")
  endif()
  list(APPEND seen ${r})
endforeach()
list(SORT seen)
if(NOT seen STREQUAL "0;1")
  message(FATAL_ERROR "flight.json holds ranks '${seen}', not 0 and 1:\n${flight}")
endif()
# `shardlab summary` says how the run ended, naming the rank that is missing.
execute_process(COMMAND ${SHARDLAB} summary ${WORK_DIR}/run RESULT_VARIABLE src
                OUTPUT_VARIABLE sout ERROR_VARIABLE serr TIMEOUT 60)
if(NOT src EQUAL 0 OR NOT sout MATCHES "how the run ended \\([^\n]*flight.json\\): the job was torn down"
   OR NOT sout MATCHES "\n  rank 0: \\(step [0-9]+\\) ended by SIGTERM while "
   OR NOT sout MATCHES "\n  rank 2: not in the file")
  message(FATAL_ERROR "summary does not say how the run ended (exit ${src}):\n${sout}${serr}")
endif()
message(STATUS "exit ${rc}; ranks 0 and 1 said what they were doing and are in flight.json; "
        "summary names rank 2 as missing")
