# Helpers shared by the train CLI tests. It sits in helpers/ because tests/CMakeLists.txt makes
# every tests/cli/*.cmake a test, and this file checks nothing by itself.
# Every test runs the `shardlab` binary given as -DSHARDLAB in its own -DWORK_DIR.

if(NOT SHARDLAB OR NOT WORK_DIR)
  message(FATAL_ERROR "run with -DSHARDLAB=<path to shardlab> -DWORK_DIR=<dir> -DSOURCE_DIR=<repo>")
endif()
file(MAKE_DIRECTORY ${WORK_DIR})

# expect_error(<name> <regex> ARGS...): shardlab ARGS must exit non-zero and print one line
# "shardlab: error: ..." on stderr that matches <regex>.
function(expect_error name regex)
  execute_process(COMMAND ${SHARDLAB} ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${name}: `shardlab ${ARGN}` exited 0, expected an error\n${out}${err}")
  endif()
  string(STRIP "${err}" line)
  if(NOT line MATCHES "^shardlab: error: ")
    message(FATAL_ERROR "${name}: stderr does not start with 'shardlab: error: ':\n${err}")
  endif()
  if(line MATCHES "\n")
    message(FATAL_ERROR "${name}: the error is more than one line:\n${err}")
  endif()
  if(NOT line MATCHES "${regex}")
    message(FATAL_ERROR "${name}: error does not match '${regex}':\n${err}")
  endif()
  message(STATUS "${name}: exit ${rc}: ${line}")
endfunction()

# run_ok(<out_var> ARGS...): shardlab ARGS must exit 0; its stdout goes to <out_var>.
function(run_ok out_var)
  execute_process(COMMAND ${SHARDLAB} ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "`shardlab ${ARGN}` exited ${rc}\n${out}${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()
