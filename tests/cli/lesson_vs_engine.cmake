# The lessons and the engine train the same model: on 4 ranks (where the engine's 1/N loss scale
# is exact) lesson 1 = `shardlab train --strategy no_shard`, lesson 4 = full_shard and lesson 5 =
# hybrid_shard --hybrid-group 2, step loss for step loss, bit for bit (same data, weights, AdamW).
include(${CMAKE_CURRENT_LIST_DIR}/lesson_run.inc)

# The losses of a run directory's rank 0 step events, as written (shortest round-trip doubles).
function(step_losses dir out)
  file(STRINGS ${dir}/rank0.jsonl lines REGEX "\"kind\":\"step\"")
  set(losses)
  foreach(line IN LISTS lines)
    string(JSON loss GET "${line}" loss)
    list(APPEND losses ${loss})
  endforeach()
  set(${out} "${losses}" PARENT_SCOPE)
endfunction()

set(common --ranks 4 --steps 3 --batch 8 --seq 32 --lr 3e-3)
foreach(pair "01_data_parallel:no_shard" "04_sharded_optimizer:full_shard"
             "05_hybrid:hybrid_shard")
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 lesson)
  list(GET pair 1 strategy)
  run_lesson(${lesson} ${common})
  set(engine_dir ${WORK_DIR}/engine_${strategy})
  set(group)  # --hybrid-group is refused with any other strategy
  if(strategy STREQUAL "hybrid_shard")
    set(group --hybrid-group 2)
  endif()
  execute_process(COMMAND ${SHARDLAB} train --model tiny ${common} --warmup 0 --schedule constant
                          --strategy ${strategy} ${group} --run-dir ${engine_dir} --overwrite
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "shardlab train --strategy ${strategy}: exit ${rc}\n${out}\n${err}")
  endif()
  step_losses(${WORK_DIR}/${lesson}_run lesson_losses)
  step_losses(${engine_dir} engine_losses)
  list(LENGTH lesson_losses n)
  if(NOT n EQUAL 3 OR NOT "${lesson_losses}" STREQUAL "${engine_losses}")
    message(FATAL_ERROR "lesson ${lesson} and --strategy ${strategy} differ:\n"
                        "  lesson: ${lesson_losses}\n  engine: ${engine_losses}")
  endif()
  message(STATUS "lesson ${lesson} = ${strategy}: ${lesson_losses}")
endforeach()
