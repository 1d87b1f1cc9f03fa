# Lesson 03 in quick mode on 4 ranks: every check it prints must pass (see lesson_run.inc).
include(${CMAKE_CURRENT_LIST_DIR}/lesson_run.inc)
run_lesson(03_sharded_grads --quick)
