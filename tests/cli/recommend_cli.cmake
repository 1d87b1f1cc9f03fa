# `shardlab plan --recommend` (docs/choosing.md): the report's parts, a recommended command that
# runs as printed, and one clear error line with exit 2 for each bad input.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

# The first recommendation's `shardlab simulate` command, run as printed, predicts the tokens/s
# its row shows (`label` names the case in the failure).
function(expect_first_row_reproduces label report)
  string(REGEX MATCH "\n  1 +([0-9]+) " row "${report}")
  set(tokens ${CMAKE_MATCH_1})
  string(REGEX MATCH "\n     shardlab simulate ([^\n]+)" cmd_line "${report}")
  separate_arguments(args UNIX_COMMAND "${CMAKE_MATCH_1}")
  run_ok(sim simulate ${args} --trace off)
  if(tokens STREQUAL "" OR NOT sim MATCHES "tokens/s +${tokens} ")
    message(FATAL_ERROR "${label}: `shardlab simulate ${args}` does not predict the ${tokens} "
                        "tokens/s the recommendation printed:\n${report}\n${sim}")
  endif()
endfunction()

set(rec plan --recommend --model tiny --ranks 16 --seq 64)

run_ok(out ${rec} --cluster h100-sxm --global-batch 32 --top 3 --dtypes bf16)
foreach(want "recommend: tiny \\([0-9.e+]+ parameters\\) on 16 ranks of h100-sxm"
             "cap 80.00 GiB per rank \\(the GPU's memory\\)"
             "searched [0-9]+ configurations in [0-9.]+ s: [0-9]+ simulated, [0-9]+ over the cap"
             "the fastest 3 that fit, by predicted tokens/s"
             "#1 peak [0-9.]+ [KMG]iB \\+ headroom [0-9.]+ [KMG]iB of 80.00 GiB \\([0-9]+%\\); step [0-9.]+ ms: compute [0-9.]+ ms, exposed comm [0-9.]+ ms"
             "the fastest that fits, per strategy")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "--recommend output lacks '${want}':\n${out}")
  endif()
endforeach()
# The first recommendation's command reproduces its prediction.
expect_first_row_reproduces(default "${out}")

# A cap only full_shard fits (small on 16 ranks, bf16: its leanest configuration, prefetch 0,
# act-ckpt, K 2, peaks at 15.28 MiB; shard_grad_op's at 19.40 MiB, hybrid G=8's at 18.51 MiB).
# Caps of MiB leave no room for a GPU's headroom (GiB): these searches compare the tracked peak.
run_ok(capped plan --recommend --model small --ranks 16 --seq 64 --cluster h100-sxm
       --global-batch 32 --dtypes bf16 --mem-limit 17MiB --top 50 --headroom none)
if(capped MATCHES "\n  [0-9]+ [^\n]*(no_shard|shard_optim|shard_grad_op|hybrid_shard)")
  message(FATAL_ERROR "a strategy other than full_shard was recommended under 17 MiB:\n${capped}")
endif()
if(NOT capped MATCHES "\n  1 [^\n]*full_shard")
  message(FATAL_ERROR "full_shard fits 17 MiB and was not recommended:\n${capped}")
endif()
if(NOT capped MATCHES "no_shard +nothing fits 17.00 MiB: its leanest needs 58.99 MiB")
  message(FATAL_ERROR "the per-strategy lines do not say no_shard does not fit:\n${capped}")
endif()

# --wraps: a wrap column, and the first row's command (with its --wrap when not block) reproduces
# its prediction.
run_ok(wraps ${rec} --cluster h100-sxm --global-batch 32 --top 3 --dtypes bf16 --wraps block,layer)
if(NOT wraps MATCHES "params/grads  wrap\n" OR NOT wraps MATCHES "\n  1 [^\n]* (block|layer)\n")
  message(FATAL_ERROR "--wraps: no wrap column, or none in row 1:\n${wraps}")
endif()
expect_first_row_reproduces(--wraps "${wraps}")

# --offloads: an offload column, and the first row's command reproduces its prediction.
# small on 2 ranks, bf16: nothing fits 30 MiB without offload (the leanest needs about 38 MiB).
run_ok(offl plan --recommend --model small --ranks 2 --seq 64 --cluster h100-sxm --global-batch 4
       --top 3 --dtypes bf16 --offloads none,optim,params --mem-limit 30MiB --headroom none)
if(NOT offl MATCHES "params/grads  offload\n" OR NOT offl MATCHES "\n  1 [^\n]* (optim|params)\n")
  message(FATAL_ERROR "--offloads under a 30 MiB cap: no offload column or row 1 not offloaded:\n${offl}")
endif()
expect_first_row_reproduces(--offloads "${offl}")

# ---- bad input: one line, exit 2
function(expect_usage name regex)
  expect_error(${name} "${regex}" ${ARGN})
  execute_process(COMMAND ${SHARDLAB} ${ARGN} WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${name}: exit ${rc}, expected 2")
  endif()
endfunction()
expect_usage(no_cluster "--recommend needs --cluster" ${rec} --global-batch 32)
expect_usage(not_divisible "--global-batch 20 is not divisible by --ranks 16" ${rec}
             --cluster h100-sxm --global-batch 20)
expect_usage(no_global_batch "--global-batch 0: must be >= 1" ${rec} --cluster h100-sxm)
expect_usage(unknown_cluster "--cluster 'h200-nvl': unknown preset" ${rec} --cluster h200-nvl
             --global-batch 32)
expect_usage(with_strategy "--recommend chooses strategy itself \\(or does not search it\\): drop --strategy"
             ${rec} --cluster h100-sxm --global-batch 32 --strategy full_shard)
expect_usage(with_prefetch "drop --prefetch" ${rec} --cluster h100-sxm --global-batch 32 --prefetch 1)
expect_usage(bad_dtype "f8" ${rec} --cluster h100-sxm --global-batch 32 --dtypes f8)
expect_usage(with_wrap "--recommend searches the wrap policies of --wraps \\(default block\\): drop --wrap"
             ${rec} --cluster h100-sxm --global-batch 32 --wrap layer)
expect_usage(bad_wraps "--wraps: " ${rec} --cluster h100-sxm --global-batch 32 --wraps block,halves)
expect_usage(with_offload "--recommend searches the host tiers of --offloads \\(default none\\): drop --offload"
             ${rec} --cluster h100-sxm --global-batch 32 --offload optim)
expect_usage(bad_offloads "--offloads: --offload 'disk'" ${rec} --cluster h100-sxm --global-batch 32
             --offloads none,disk)
expect_error(global_batch_alone "--global-batch belongs to --recommend"
             plan --model tiny --global-batch 32)

# Nothing fits: a message saying what the leanest configuration needs, exit 2.
execute_process(COMMAND ${SHARDLAB} ${rec} --cluster h100-sxm --global-batch 32 --mem-limit 1MiB
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE none ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT none MATCHES "nothing fits 1.00 MiB per rank: the leanest configuration \\(full_shard, prefetch [0-9], act-ckpt on, K 2, [a-z0-9]+/[a-z0-9]+\\) needs [0-9.]+ [KMG]iB")
  message(FATAL_ERROR "a cap nothing fits: exit ${rc}, expected 2 and the leanest peak:\n${none}${err}")
endif()
