# `shardlab train` with the FSDP engine, `shardlab plan` and their bad input: a memory limit that
# no_shard exceeds and full_shard trains in, a run directory with every file, the ZeRO example,
# and one clear error line for each wrong option.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

file(REMOVE_RECURSE ${WORK_DIR}/run1)
set(tiny train --model tiny --steps 2 --ranks 4 --batch 8 --seq 32)

# 2.2 MiB per rank: DDP holds 16 x 120,576 bytes = 1.84 MiB of state before any activation.
expect_error(ddp_oom "rank [0-3]: out of memory: .* In use by category: params .*optimizer_state"
             ${tiny} --strategy no_shard --mem-limit 2.2MiB)
run_ok(fsdp_fits ${tiny} --strategy full_shard --mem-limit 2.2MiB --run-dir run1)
foreach(want "parallel: full_shard on 4 ranks \\(local\\)" "memory limit 2.20 MiB/rank"
             "params_unsharded" "run directory: run1")
  if(NOT fsdp_fits MATCHES "${want}")
    message(FATAL_ERROR "full_shard output lacks '${want}':\n${fsdp_fits}")
  endif()
endforeach()
foreach(f meta.json rank0.jsonl rank3.jsonl summary.json trace.json)
  if(NOT EXISTS ${WORK_DIR}/run1/${f})
    message(FATAL_ERROR "run directory lacks ${f}")
  endif()
endforeach()
file(READ ${WORK_DIR}/run1/meta.json meta)
if(NOT meta MATCHES "\"strategy\": \"full_shard\"" OR NOT meta MATCHES "\"world_size\": 4")
  message(FATAL_ERROR "meta.json does not describe the run:\n${meta}")
endif()
# `shardlab summary DDP FSDP`: per step and rank, full_shard sends 1.5x what DDP sends, over 3x the
# buffers (tiny's units split evenly over 4 ranks: no padding).
run_ok(ddp_dir ${tiny} --strategy no_shard --run-dir run_ddp --overwrite)
run_ok(compare summary run_ddp run1)
if(NOT compare MATCHES "run1 against run_ddp, per step and rank: sent per rank 1.50x, buffer 3.00x"
   OR NOT compare MATCHES "per step and rank:\n")
  message(FATAL_ERROR "summary of two runs lacks the per-step ratios:\n${compare}")
endif()
execute_process(COMMAND ${SHARDLAB} summary run1 no_such_run WORKING_DIRECTORY ${WORK_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "^shardlab summary: .*no_such_run: no such run directory")
  message(FATAL_ERROR "summary of a missing second run: exit ${rc}\n${out}${err}")
endif()

# The same directory again needs --overwrite.
expect_error(run_dir_exists "run1: run directory exists and is not empty"
             ${tiny} --run-dir run1)
run_ok(again ${tiny} --run-dir run1 --overwrite)

# Every strategy trains the same losses on the local backend (rank-ordered reductions).
run_ok(ddp ${tiny} --strategy no_shard)
run_ok(zero2 ${tiny} --strategy shard_grad_op --accum 2 --accum-mode no_sync)
run_ok(ddp2 ${tiny} --strategy no_shard --accum 2)
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+" a "${ddp2}")
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+" b "${zero2}")
if(NOT a STREQUAL b)
  message(FATAL_ERROR "no_shard and shard_grad_op (no_sync) losses differ:\n${a}\n${b}")
endif()
# --keep-root: the losses of no_shard, and the run line says so (the bytes: FsdpEngine's tests).
run_ok(keep_root ${tiny} --strategy full_shard --keep-root)
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+" k "${keep_root}")
string(REGEX MATCHALL "\n +[0-9]+ \\| +[0-9.]+" d "${ddp}")
if(NOT k STREQUAL d OR NOT keep_root MATCHES "root kept for the backward")
  message(FATAL_ERROR "--keep-root run differs from no_shard or does not say so:\n${keep_root}")
endif()
run_ok(hsdp ${tiny} --strategy hybrid_shard --hybrid-group 2 --param-dtype bf16 --clip 1
       --act-ckpt --prefetch 2 --max-inflight-gathers 2)

# Bad parallel options name the option and the value.
expect_error(bad_strategy "unknown strategy 'zero4'" ${tiny} --strategy zero4)
expect_error(bad_split "--batch 6 must split evenly over --ranks 4" train --model tiny --ranks 4 --batch 6)
expect_error(bad_group "--hybrid-group 3 must divide --ranks 4" ${tiny} --strategy hybrid_shard --hybrid-group 3)
expect_error(bad_dtype "unknown dtype 'fp8'" ${tiny} --param-dtype fp8)
expect_error(bad_limit "cannot read 'lots' as a size" ${tiny} --mem-limit lots)
expect_error(bad_backend "--backend 'gloo': expected local or mpi" ${tiny} --backend gloo)

# The planner: the ZeRO paper's example and a model plan that says what fits.
run_ok(zero plan --params 7.5e9 --ranks 64 --param-dtype f16 --reduce-dtype f16 --decimal)
foreach(gb "120.000" "31.406" "16.641" "1.875")
  if(NOT zero MATCHES "${gb}")
    message(FATAL_ERROR "plan lacks ${gb} GB:\n${zero}")
  endif()
endforeach()
run_ok(fits plan --model tiny --ranks 4 --batch 2 --seq 32 --mem-limit 2.2MiB)
if(NOT fits MATCHES "no_shard +4 +1 [^\n]* NO" OR NOT fits MATCHES "full_shard +4 +4 [^\n]* yes")
  message(FATAL_ERROR "plan does not say no_shard fails and full_shard fits:\n${fits}")
endif()
expect_error(bad_params "--params many" plan --params many)
# --params alone: model states only, never "fits", never exit 2 for a cap.
run_ok(states plan --params 1e9 --ranks 8 --mem-limit 1MiB)
if(NOT states MATCHES "model states only" OR states MATCHES " yes" OR states MATCHES " NO"
   OR NOT states MATCHES "not compared")
  message(FATAL_ERROR "plan --params with a cap:\n${states}")
endif()
expect_error(plan_params_shape "--params with --n-layer" plan --params 1e9 --n-layer 4)
expect_error(plan_params_model "--params with --model" plan --params 1e9 --model gpt2)
expect_error(plan_heads "--n-head 5 does not divide --n-embd 128"
             plan --model small --n-embd 128 --n-head 5)
expect_error(plan_preset "unknown preset 'huge'" plan --model huge)
expect_error(plan_seq "--seq 300 exceeds the model's max_seq_len 256" plan --model small --seq 300)
expect_error(plan_cluster_ranks "--ranks 12 is not a multiple"
             plan --model small --ranks 12 --cluster h100-sxm)
# A shape override and a cluster: the step is timed.
run_ok(timed plan --model small --n-layer 2 --ranks 8 --batch 2 --seq 64 --cluster h100-sxm)
# On a cluster "fits" compares the peak plus the GPU's headroom (its own column) with its memory.
if(NOT timed MATCHES "tokens/s" OR NOT timed MATCHES "full_shard +8 +8 [^\n]* [0-9.]+ +yes +[0-9.]+ +[0-9]+ +[0-9.]+"
   OR NOT timed MATCHES "fits: peak \\+ headroom <= 80.00 GiB \\(the GPU's memory\\)")
  message(FATAL_ERROR "plan --cluster lacks its time columns:\n${timed}")
endif()
