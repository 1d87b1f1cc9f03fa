# `shardlab train` options out of range (sourced by run_corpus.sh): numbers that wrapped, rounded to
# "off", hung or crashed before they were checked. Every case fails before the first step or at it.
section "train options"
# (A regex that begins with "-" reads as a grep option in run_corpus.sh: these begin "error: ".)
bad steps_negative "error: --steps -5" "$SHARDLAB" train --model tiny --steps -5
bad unknown_preset "huge" "$SHARDLAB" train --model huge --steps 1

# Sizes: past int64 llround gave INT64_MIN ("--mem-limit -9223372036854775808"); below one byte
# the limit rounded to 0, which means none, and the run went on unlimited.
bad mem_limit_past_int64 "mem-limit '1e20' is .* more than the largest size" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --mem-limit 1e20
bad mem_limit_rounds_to_zero "mem-limit '0.4' rounds to 0 bytes" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --mem-limit 0.4

# The batch split: ranks x accum was an int product ("use a multiple of -2"); rows x seq past int32
# wrapped the loader's buffer size and the run died of SIGSEGV.
bad accum_product_wraps "use a multiple of 4294967294" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --ranks 2 --accum 2147483647 --batch 2
bad batch_tokens_wrap "error: --batch 4611686018427387904 x --seq 64" \
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
# 2 GB address space run out within 128 ranks. (Not under a sanitizer: its shadow memory alone
# exceeds the address-space limit.)
[ -z "${SHARDLAB_SANITIZER:-}" ] && bad ranks_threads_exhausted "rank [0-9]+: .*(could not start a thread of this rank|Resource temporarily unavailable|allocation)" \
  bash -c 'ulimit -s 65536 && ulimit -v 2000000 && exec "$0" train --model tiny --steps 1 --trace off --ranks 128 --batch 128 --seq 8' "$SHARDLAB"

# Numbers the optimizer and the model cannot use.
bad eps_infinite "eps inf must be finite" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --eps inf

# The synthetic corpus, named as its options: a bare std::bad_alloc before.
bad corpus_tokens_past_memory "corpus-tokens 100000000000000 (needs|asks for)" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --corpus-tokens 100000000000000
bad corpus_tokens_one "error: --corpus-tokens 1: must be >= 2" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --corpus-tokens 1
bad synthetic_successors_zero "error: --synthetic-successors 0" \
  "$SHARDLAB" train --model tiny --steps 1 --trace off --synthetic-successors 0


# ---- sizes: refused up front, naming the option and the bytes, instead of std::bad_alloc ------
bad batch_1e9 'batch 1000000000 x --seq 64(: a micro-batch .* exceeds 2147483647 tokens| asks for .* more than this machine)' \
  "$SHARDLAB" train --model tiny --steps 1 --batch 1000000000 --trace off
bad batch_1e9_float 'batch' "$SHARDLAB" train --model tiny --steps 1 --batch 1e9 --trace off
bad batch_int_max 'batch 2147483647 x --seq 64(: a micro-batch .* exceeds 2147483647 tokens| asks for .* more than this machine)' \
  "$SHARDLAB" train --model tiny --steps 1 --batch 2147483647 --trace off
bad n_layer_100000000 'n-layer 100000000: the model .* asks for .* more than this machine' \
  "$SHARDLAB" train --model tiny --steps 1 --n-layer 100000000 --trace off
bad n_embd_overflow 'n_embd 2147483646 give .* more than the 2\^56' \
  "$SHARDLAB" train --model tiny --steps 1 --n-embd 2147483646 --trace off
bad corpus_tokens_100000000000 'corpus-tokens 100000000000 asks for .* more than this machine' \
  "$SHARDLAB" train --model tiny --steps 1 --corpus-tokens 100000000000 --trace off
bad mem_limit_beyond_int64 "mem-limit '99999999999999999999999GiB' is .* more than the largest size" \
  "$SHARDLAB" train --model tiny --steps 1 --mem-limit 99999999999999999999999GiB --trace off
bad plan_mem_limit_beyond_int64 "mem-limit '1e30' is .* more than the largest size" \
  "$SHARDLAB" plan --model tiny --mem-limit 1e30
bad plan_params_1e30 'params 1e30: .* more than the 2\^56' "$SHARDLAB" plan --params 1e30

# ---- --hybrid-group means nothing to the other strategies: refused, not ignored ----------------
bad hybrid_group_full_shard 'hybrid-group 2 applies only to --strategy hybrid_shard .*full_shard' \
  "$SHARDLAB" train --model tiny --steps 1 --ranks 2 --hybrid-group 2 --trace off
bad hybrid_group_zero_no_shard 'hybrid-group 0 applies only to --strategy hybrid_shard .*no_shard' \
  "$SHARDLAB" train --model tiny --steps 1 --ranks 2 --strategy no_shard --hybrid-group 0 --trace off

# ---- divergence: NaN or Inf stops the run at its step, before it reaches a checkpoint ----------
# SGD at lr 10 turns every parameter into NaN by about step 9; the fast exp used to map NaN to a
# tiny finite value, so the loss read ln 256 = 5.5452 and the run exited 0.
diverge=(--model tiny --steps 20 --warmup 0 --optimizer sgd --lr 10 --trace off)
bad sgd_lr10_diverges 'step [0-9]+: .*(holds NaN or Inf on rank 0|left NaN or Inf|loss is (NaN|[+-]Inf))' \
  "$SHARDLAB" train "${diverge[@]}"
bad sgd_lr10_diverges_2_ranks 'step [0-9]+: .*(NaN or Inf.* on rank [01]|loss is)' \
  "$SHARDLAB" train "${diverge[@]}" --ranks 2
bad sgd_lr10_diverges_saving 'step [0-9]+: .*(NaN or Inf|loss is)' \
  "$SHARDLAB" train "${diverge[@]}" --save-every 1 --ckpt-dir div_ckpt
# The newest checkpoint is the last step with finite parameters: it exports and loads (--init-from
# refuses a NaN or Inf tensor; --steps 0 loads without training from it).
last_checkpoint_exports_and_loads() {
  "$SHARDLAB" export div_ckpt div.safetensors &&
    "$SHARDLAB" train --model tiny --steps 0 --trace off --init-from div.safetensors
}
expect diverged_ckpt_is_finite last_checkpoint_exports_and_loads

# --init-from a safetensors file holding one NaN: refused at load, naming file and tensor.
"$SHARDLAB" train --model tiny --steps 1 --trace off --save-every 1 --ckpt-dir "$WORK/nan_src" \
  >/dev/null 2>&1
"$SHARDLAB" export "$WORK/nan_src" "$WORK/nan.safetensors" >/dev/null 2>&1
header=$(od -An -t u8 -N8 "$WORK/nan.safetensors" | tr -d ' ')
printf '\000\000\300\177' |  # 0x7fc00000, a quiet NaN, over the first float of the data
  dd of="$WORK/nan.safetensors" bs=1 seek=$((8 + header)) conv=notrunc status=none
bad init_from_nan 'nan.safetensors: tensor [a-z0-9_.]+ holds nan at element 0 of' \
  "$SHARDLAB" train --model tiny --steps 2 --trace off --init-from nan.safetensors

section "plan options"
# --params 1e30 cast to INT64_MIN ("--params -9223372036854775808 must be >= 0"); 1e18 wrapped the
# 16 bytes per parameter into negative sizes in the table.
bad plan_params_inf "error: --params inf: .* more than the 2\\^56" "$SHARDLAB" plan --params inf --ranks 8
bad plan_params_wraps "error: --params 1e18: .* more than the 2\\^56" "$SHARDLAB" plan --params 1e18 --ranks 8

# ---- options that were accepted and then ignored: refused, naming what they would not change --
section "ignored options"
bad keep_root_no_shard_train 'keep-root applies only to strategies that free .*no_shard keeps whole parameters' \
  "$SHARDLAB" train --model tiny --steps 1 --strategy no_shard --keep-root --trace off
bad keep_root_shard_grad_op_simulate 'keep-root applies only .*shard_grad_op keeps whole parameters' \
  "$SHARDLAB" simulate --model tiny --ranks 8 --batch 8 --strategy shard_grad_op --keep-root --trace off
bad keep_root_shard_optim_plan 'keep-root applies only to full_shard and hybrid_shard .*which this plan leaves out' \
  "$SHARDLAB" plan --model tiny --ranks 4 --strategy shard_optim --keep-root
bad plan_hybrid_group_full_shard 'hybrid-group 2 applies only to hybrid_shard, which this plan leaves out' \
  "$SHARDLAB" plan --model tiny --ranks 4 --strategy full_shard --hybrid-group 2
bad plan_params_with_wrap 'params with --wrap' "$SHARDLAB" plan --params 1e9 --wrap layer
bad plan_params_half 'params 0.5: a parameter count is a whole number >= 1' "$SHARDLAB" plan --params 0.5
bad plan_params_minus_zero 'params -0: a parameter count is a whole number >= 1' "$SHARDLAB" plan --params -0
bad recommend_seq_negative 'seq -5: must be >= 1' \
  "$SHARDLAB" plan --recommend --cluster h100-sxm --model tiny --ranks 8 --global-batch 8 --seq -5
bad recommend_wraps_repeated "wraps: 'block' is listed twice" \
  "$SHARDLAB" plan --recommend --cluster h100-sxm --model tiny --ranks 8 --global-batch 8 --wraps block,block,block
bad command_typo "unknown command 'trian' \(did you mean 'train'\?\)" "$SHARDLAB" trian --steps 1
# A model too deep to plan grew the planner's memory without bound (train refuses it at once).
bad plan_n_layer_1e9 'n-layer 1000000000: more than the 65536 blocks the planner simulates' --timeout 30 \
  "$SHARDLAB" plan --model tiny --n-layer 1000000000
bad simulate_n_layer_1e9 'n-layer 1000000000: more than the 65536 blocks a simulation takes' --timeout 30 \
  "$SHARDLAB" simulate --model tiny --n-layer 1000000000 --ranks 8 --batch 8 --trace off

# ---- divergence that stays finite: --lr 1000 took the loss from 5.5 to 69 and kept it there ----
bad lr_1000_diverges 'step [0-9]+: loss [0-9.]+ is above 2 x the best loss .* 10 steps in a row .*the run diverged' \
  "$SHARDLAB" train --model tiny --steps 40 --lr 1000 --trace off
bad lr_1000_diverges_saving 'the run diverged .*stopped before saving, the last checkpoint is .*step-1' \
  "$SHARDLAB" train --model tiny --steps 40 --lr 1000 --trace off --save-every 1 --ckpt-dir lr1000_ckpt
expect lr_1000_latest_is_not_diverged grep -qx 'step-1' lr1000_ckpt/latest
good lr_1000_warn_runs_on 'warning: step [0-9]+: .*the run diverged' \
  "$SHARDLAB" train --model tiny --steps 20 --lr 1000 --trace off --on-divergence warn
