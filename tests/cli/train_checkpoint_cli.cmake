# `shardlab train` with checkpoints, and the commands around it: a 6-step run saving every 3
# steps; the same run "killed" after step 3's checkpoint and continued with --resume latest prints
# the same step lines 4-6; `inspect`, `export`, `--init-from` and `summary` work on what it left;
# the run directory is on by default and off with --trace off; bad checkpoints, options that need
# each other and --device cuda on a machine without one give one clear error and a non-zero exit.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

file(REMOVE_RECURSE ${WORK_DIR}/ckpt ${WORK_DIR}/runs ${WORK_DIR}/full_run ${WORK_DIR}/resumed_run
     ${WORK_DIR}/model.safetensors)

# expect_fail(<name> <regex> ARGS...): shardlab ARGS exits non-zero and stderr matches <regex>
# (for the subcommands that report their own errors: summary, inspect, export).
function(expect_fail name regex)
  execute_process(COMMAND ${SHARDLAB} ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "${regex}")
    message(FATAL_ERROR "${name}: `shardlab ${ARGN}` exited ${rc}, expected non-zero and an "
                        "error matching '${regex}':\n${out}${err}")
  endif()
  string(STRIP "${err}" err)
  message(STATUS "${name}: exit ${rc}: ${err}")
  set(rc ${rc} PARENT_SCOPE)
endfunction()

# step_lines(<var> <output> <first>): the "step | loss | lr" columns of step lines >= <first>.
function(step_lines var text first)
  string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+ \\| [0-9.e+-]+" all "${text}")
  set(keep)
  foreach(line ${all})
    string(REGEX MATCH "[0-9]+" step "${line}")
    if(step GREATER_EQUAL ${first})
      list(APPEND keep "${line}")
    endif()
  endforeach()
  set(${var} "${keep}" PARENT_SCOPE)
endfunction()

# ---- save, "crash", resume from latest ---------------------------------------------------------
set(base train --model tiny --steps 6 --batch 4 --seq 32 --ranks 2 --save-every 3 --ckpt-dir ckpt)
run_ok(full ${base} --run-dir full_run)
foreach(want "saved ckpt/step-3" "saved ckpt/step-6" "run directory: full_run")
  if(NOT full MATCHES "${want}")
    message(FATAL_ERROR "the saving run's output lacks '${want}':\n${full}")
  endif()
endforeach()

# As if the process died during step 5: step-6 never written, `latest` names step-3.
file(REMOVE_RECURSE ${WORK_DIR}/ckpt/step-6)
file(WRITE ${WORK_DIR}/ckpt/latest "step-3\n")
run_ok(resumed ${base} --resume latest --run-dir resumed_run)
if(NOT resumed MATCHES "resumed from ckpt/step-3 at step 3 \\(saved by 2 ranks, full_shard\\)")
  message(FATAL_ERROR "no resume line:\n${resumed}")
endif()
step_lines(want_lines "${full}" 4)
step_lines(got_lines "${resumed}" 1)
list(LENGTH got_lines n)
if(NOT n EQUAL 3 OR NOT got_lines STREQUAL want_lines)
  message(FATAL_ERROR "resumed step lines differ from the uninterrupted run's steps 4-6:\n"
                      "${got_lines}\n--- expected\n${want_lines}")
endif()
message(STATUS "resumed steps 4-6 match:${got_lines}")

# ---- inspect, export, init-from, summary -------------------------------------------------------
run_ok(insp inspect ckpt)
foreach(want "checkpoint  ckpt/step-6" "step        6 \\(optimizer step 6\\)"
             "saved by    2 ranks, strategy full_shard" "\"position\":6" "checksums   ok")
  if(NOT insp MATCHES "${want}")
    message(FATAL_ERROR "inspect output lacks '${want}':\n${insp}")
  endif()
endforeach()
run_ok(exp export ckpt model.safetensors)
file(SIZE ${WORK_DIR}/model.safetensors bytes)
if(NOT exp MATCHES "exported 28 tensors \\(f32\\)" OR bytes LESS 482304)  # 120,576 floats
  message(FATAL_ERROR "export wrote ${bytes} bytes:\n${exp}")
endif()
run_ok(init train --model tiny --steps 1 --batch 4 --seq 32 --init-from model.safetensors
       --trace off)
if(NOT init MATCHES "parameters from model.safetensors")
  message(FATAL_ERROR "--init-from did not say where the parameters came from:\n${init}")
endif()
run_ok(sum summary resumed_run)
foreach(want "run resumed_run" "strategy full_shard +world 2" "steps 3 " "peak by category"
             "all_gather")
  if(NOT sum MATCHES "${want}")
    message(FATAL_ERROR "summary output lacks '${want}':\n${sum}")
  endif()
endforeach()

# ---- the run directory: on by default, off with --trace off ------------------------------------
run_ok(default_dir train --model tiny --steps 2 --batch 4 --seq 32)
string(REGEX MATCH "run directory: (runs/full_shard-n1-[0-9-]+)" m "${default_dir}")
if(NOT m OR NOT EXISTS ${WORK_DIR}/${CMAKE_MATCH_1}/summary.json)
  message(FATAL_ERROR "no default run directory with a summary.json:\n${default_dir}")
endif()
file(GLOB before ${WORK_DIR}/runs/*)
run_ok(no_trace train --model tiny --steps 2 --batch 4 --seq 32 --trace off)
file(GLOB after ${WORK_DIR}/runs/*)
if(no_trace MATCHES "run directory" OR NOT before STREQUAL after)
  message(FATAL_ERROR "--trace off still wrote a run directory:\n${no_trace}")
endif()

# ---- bad inputs --------------------------------------------------------------------------------
expect_error(resume_missing "no_ckpt: not a checkpoint \\(no index.json and no latest file\\)"
             ${base} --resume no_ckpt --trace off)
expect_error(resume_latest_alone "--resume latest needs --ckpt-dir"
             train --model tiny --resume latest)
expect_error(save_without_dir "--save-every 3 needs --ckpt-dir" train --model tiny --save-every 3)
expect_error(resume_other_model "model_config.n_layer: checkpoint 2, this run 3"
             ${base} --n-layer 3 --resume latest --trace off)
expect_error(resume_other_batch "batch 4, this run has 8 \\(--batch\\)"
             ${base} --batch 8 --resume latest --trace off)
expect_error(init_missing "absent.safetensors"
             train --model tiny --steps 1 --init-from absent.safetensors --trace off)

# A corrupted shard: four bytes overwritten inside rank 1's file.
execute_process(COMMAND sh -c "printf zzzz | dd of=ckpt/step-3/shard-1.bin bs=1 seek=1000 conv=notrunc"
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not corrupt the shard (dd failed)")
endif()
set(crc "ckpt/step-3/shard-1.bin: checksum mismatch in bytes \\[[0-9]+, [0-9]+\\) \\(tensor ")
expect_fail(inspect_corrupt "${crc}" inspect ckpt/step-3)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "inspect of a corrupted checkpoint exited ${rc}, expected 1")
endif()
expect_error(resume_corrupt "${crc}" ${base} --resume ckpt/step-3 --trace off)

expect_fail(inspect_missing "shardlab inspect: .*nowhere: not a checkpoint" inspect nowhere)
expect_fail(export_missing "shardlab export: .*nowhere: not a checkpoint" export nowhere x.st)
expect_fail(export_dtype "--dtype f16: use f32 or bf16" export ckpt x.st --dtype f16)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "export with a bad --dtype exited ${rc}, expected 2 (usage)")
endif()
expect_fail(summary_missing "shardlab summary: nowhere: no such run directory" summary nowhere)

# ---- --device ----------------------------------------------------------------------------------
expect_error(cuda_needs_nccl "--device cuda needs --backend nccl" train --model tiny --device cuda)
expect_error(nccl_needs_cuda "--backend nccl needs --device cuda" train --model tiny --backend nccl)
# Without a GPU (this project's build machines) a CPU build says it lacks CUDA and a CUDA build
# that it finds no device; where a GPU is present the one step must run on it.
set(cuda_args train --model tiny --steps 1 --batch 4 --seq 32 --device cuda --backend nccl
              --trace off)
execute_process(COMMAND ${SHARDLAB} ${cuda_args} WORKING_DIRECTORY ${WORK_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  if(NOT out MATCHES "on 1 rank \\(nccl, cuda\\)")
    message(FATAL_ERROR "--device cuda ran, but not on the GPU:\n${out}")
  endif()
  message(STATUS "cuda_here: a GPU is present and the step ran on it")
else()
  expect_error(cuda_here "backend nccl: (this build has no CUDA|no CUDA device)" ${cuda_args})
endif()
