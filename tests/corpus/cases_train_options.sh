# `shardlab train` options out of range (sourced by run_corpus.sh): numbers that wrapped, rounded to
# "off", hung or crashed before they were checked. Every case fails before the first step or at it.
section "train options"
# (A regex that begins with "-" reads as a grep option in run_corpus.sh: these begin "error: ".)
bad steps_negative "error: --steps -5" "$SHARDLAB" train --model tiny --steps -5
bad unknown_preset "huge" "$SHARDLAB" train --model huge --steps 1

# Sizes: past int64 llround gave INT64_MIN ("--mem-limit -9223372036854775808"); below one byte
# the limit rounded to 0, which means none, and the run went on unlimited.
bad mem_limit_past_int64 "size '1e20' is too large" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --mem-limit 1e20
bad mem_limit_rounds_to_zero "size '0.4' rounds to 0 bytes" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --mem-limit 0.4

# The batch split: ranks x accum was an int product ("use a multiple of -2"); rows x seq past int32
# wrapped the loader's buffer size and the run died of SIGSEGV.
bad accum_product_wraps "use a multiple of 4294967294" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --ranks 2 --accum 2147483647 --batch 2
bad batch_tokens_wrap "error: --batch 4611686018427387904 x --seq 64: .*exceeds 2147483647 tokens" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --batch 4611686018427387904
bad batch_tokens_past_int32 "error: --batch 2147483648 x --seq 1" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --batch 2147483648 --seq 1

# The largest step counts: the print interval's search wrapped and never ended, so the run hung
# before its first step. Now it reaches the step (and this memory limit stops it there).
bad steps_int64_max "rank 0: out of memory: activations" \
  "$SHARDLAB" train --model tiny --trace off --steps 9223372036854775807 --mem-limit 4MiB

# Threads: thousands of OpenBLAS threads exhausted memory, then OpenBLAS retried forever.
bad threads_beyond_hardware "error: --threads 100000: more than the [0-9]+ hardware threads" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --threads 100000
# Ranks are threads too: when one could not start, joinable threads were destroyed and the
# process aborted ("terminate called without an active exception", SIGABRT). 64 MiB stacks in a
# 2 GB address space run out within 128 ranks.
bad ranks_threads_exhausted "rank [0-9]+: .*(could not start the thread|Resource temporarily unavailable|allocation)" \
  bash -c 'ulimit -s 65536 && ulimit -v 2000000 && exec "$0" train --model tiny --steps 1 --trace off --ranks 128 --batch 128 --seq 8' "$SHARDLAB"

# Numbers the optimizer and the model cannot use.
bad eps_infinite "eps inf must be finite" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --eps inf
bad n_embd_wraps_param_count "C=2147483646 is .* parameters, more than the 1e15" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --n-embd 2147483646 --n-head 2

# The synthetic corpus, named as its options: a bare std::bad_alloc before.
bad corpus_tokens_past_memory "corpus: --corpus-tokens 100000000000000 needs" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --corpus-tokens 100000000000000
bad corpus_tokens_one "error: --corpus-tokens 1: must be >= 2" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --corpus-tokens 1
bad synthetic_successors_zero "error: --synthetic-successors 0" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --synthetic-successors 0

section "plan options"
# --params 1e30 cast to INT64_MIN ("--params -9223372036854775808 must be >= 0"); 1e18 wrapped the
# 16 bytes per parameter into negative sizes in the table.
bad plan_params_inf "error: --params inf: at most 1e15" "$SHARDLAB" plan --params inf --ranks 8
bad plan_params_wraps "error: --params 1e18: at most 1e15" "$SHARDLAB" plan --params 1e18 --ranks 8
