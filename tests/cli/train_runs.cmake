# `shardlab train` runs that must succeed: a 3-step tiny run prints its header, three step lines
# and a summary; a text file encoded to .bin trains the same as the text itself.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

run_ok(out train --model tiny --steps 3 --batch 4 --seq 32)
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+ \\| [^\n]*" lines "${out}")
list(LENGTH lines count)
if(NOT count EQUAL 3)
  message(FATAL_ERROR "expected 3 step lines, got ${count}:\n${out}")
endif()
foreach(want "step \\|     loss" "entropy rate" "final loss [0-9.]+ \\(mean of the last 3 steps\\)"
             "tokens/s" "peak memory")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "output lacks '${want}':\n${out}")
  endif()
endforeach()
# The first loss of a freshly initialised model is close to log(256) = 5.545 (near-uniform output).
if(NOT out MATCHES "\n +1 \\| +5\\.[3-7]")
  message(FATAL_ERROR "first step loss is not near log(256):\n${out}")
endif()

# Text and its .bin encoding are the same tokens, so the same seed gives the same losses.
set(notes ${SOURCE_DIR}/data/fsdp_notes.txt)
run_ok(enc data encode ${notes} ${WORK_DIR}/notes.bin)
file(SIZE ${notes} bytes)
if(NOT enc MATCHES "wrote ${bytes} tokens")
  message(FATAL_ERROR "encode did not write ${bytes} tokens:\n${enc}")
endif()
run_ok(info data info ${WORK_DIR}/notes.bin)
if(NOT info MATCHES "${bytes} tokens")
  message(FATAL_ERROR "data info disagrees with the file size ${bytes}:\n${info}")
endif()
run_ok(from_text train --model tiny --steps 2 --batch 2 --seq 16 --data ${notes})
run_ok(from_bin train --model tiny --steps 2 --batch 2 --seq 16 --data ${WORK_DIR}/notes.bin)
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+" a "${from_text}")
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+" b "${from_bin}")
if(NOT a STREQUAL b OR a STREQUAL "")
  message(FATAL_ERROR "text and .bin runs differ:\n${from_text}\n---\n${from_bin}")
endif()
