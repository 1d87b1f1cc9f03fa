# Lessons refuse options that cannot work, naming the option.
include(${CMAKE_CURRENT_LIST_DIR}/lesson_run.inc)
expect_error(01_data_parallel "--batch 7 must be a multiple of --ranks 4" --quick --batch 7)
expect_error(02_sharded_params "unknown preset 'huge'" --quick --model huge)
expect_error(03_sharded_grads "--seq 65 exceeds the tiny model's max_seq_len 64" --quick --seq 65)
expect_error(05_hybrid "--group 3 must divide --ranks 4" --quick --group 3)
expect_error(04_sharded_optimizer "--ranks" --quick --ranks 0)
