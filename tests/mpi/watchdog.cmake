# The MPI backend's collective watchdog: under mpirun -np 4, rank 3 sleeps 600 s before step 2.
# The other ranks' waits outlast --collective-timeout; they ask every rank where it is, name
# rank 3 alone (ranks 1 and 2 answer from inside the collective), write flight.json, and the job
# ends through MPI_Abort within seconds, not 600 s.
# Run with -DMPIEXEC=... -DMPI_FLAGS=... -DSHARDLAB=... -DWORK_DIR=...
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIEXEC} -np 4 ${MPI_FLAGS} ${SHARDLAB} train --backend mpi --model tiny --steps 4
          --collective-timeout 2 --hang-rank 3:2:600 --run-dir ${WORK_DIR}/run
  WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0\n${out}${err}")
endif()
if(NOT err MATCHES "failed: collective watchdog: [^\n]* rank 3 did not arrive")
  message(FATAL_ERROR "rank 3 is not named as missing:\n${out}${err}")
endif()
if(err MATCHES "rank [012] did not arrive" OR NOT err MATCHES "rank 1: #[0-9]+ ")
  message(FATAL_ERROR "ranks that answered are named as missing, or their place is not given:\n${err}")
endif()
if(took GREATER 60)
  message(FATAL_ERROR "the job took ${took} s to stop")
endif()
if(NOT EXISTS ${WORK_DIR}/run/flight.json)
  message(FATAL_ERROR "no flight.json\n${err}")
endif()
message(STATUS "stopped after ${took} s (exit ${rc}), rank 3 named, flight.json written")
