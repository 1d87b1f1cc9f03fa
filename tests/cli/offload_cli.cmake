# `shardlab train --offload` and `shardlab plan --offload`: a device limit that full_shard exceeds
# and --offload params trains in (the numbers from `shardlab plan`: full_shard peaks at 1.840 MiB,
# with --offload params at 1.428 MiB, for this run), the host tier in the step line, the summary
# and the run directory, the host limit, and the refusals.
include(${CMAKE_CURRENT_LIST_DIR}/helpers/train_common.cmake)

file(REMOVE_RECURSE ${WORK_DIR}/offload_run)
set(tiny train --model tiny --steps 2 --ranks 4 --batch 8 --seq 32 --strategy full_shard)

expect_error(fsdp_oom "rank [0-3]: out of memory" ${tiny} --mem-limit 1.6MiB)
run_ok(offloaded ${tiny} --mem-limit 1.6MiB --offload params --run-dir offload_run)
foreach(want "offload params" "peak MiB \\| host MiB" "device peak " "host peak [0-9.]+ KiB \\(params"
             "copied per step: host to device [0-9.]+ KiB, device to host [0-9.]+ KiB")
  if(NOT offloaded MATCHES "${want}")
    message(FATAL_ERROR "--offload params output lacks '${want}':\n${offloaded}")
  endif()
endforeach()
file(READ ${WORK_DIR}/offload_run/rank0.jsonl events)
if(NOT events MATCHES "\"tier\":\"host\"" OR NOT events MATCHES "\"lane\":\"copy\",\"op\":\"h2d\"")
  message(FATAL_ERROR "rank0.jsonl lacks host-tier memory events or copy spans")
endif()
run_ok(summary summary offload_run)
if(NOT summary MATCHES "host memory and copies between tiers")
  message(FATAL_ERROR "summary lacks the host tier:\n${summary}")
endif()

run_ok(optim ${tiny} --offload optim --strategy shard_grad_op --param-dtype bf16)
expect_error(host_oom "rank [0-3]: out of memory" ${tiny} --offload optim --host-mem-limit 64KiB)

# The planner: a host peak column, and the strategies params offload does not apply to.
run_ok(plan_off plan --model tiny --ranks 4 --batch 2 --seq 32 --offload params --mem-limit 1.6MiB)
if(NOT plan_off MATCHES "host peak" OR NOT plan_off MATCHES "full_shard +4 +4 [^\n]* 0.460  yes"
   OR NOT plan_off MATCHES "not planned with --offload params")
  message(FATAL_ERROR "plan --offload params:\n${plan_off}")
endif()

# Refusals name the option.
expect_error(bad_offload "--offload 'gpu': expected none, optim or params" ${tiny} --offload gpu)
expect_error(params_ddp "--offload params with --strategy no_shard: no_shard keeps full parameters"
             ${tiny} --offload params --strategy no_shard)
expect_error(host_needs_offload "--host-mem-limit needs --offload" ${tiny} --host-mem-limit 1GiB)
expect_error(bad_host_limit "--host-mem-limit" ${tiny} --offload optim --host-mem-limit lots)
expect_error(plan_params_ddp "--offload params with --strategy no_shard"
             plan --model tiny --ranks 4 --offload params --strategy no_shard)
