# `shardlab train` options out of range (sourced by run_corpus.sh).
section "train options"
bad steps_negative "steps -5" "$SHARDLAB" train --model tiny --steps -5
bad unknown_preset "huge" "$SHARDLAB" train --model huge --steps 1

# ---- sizes: refused up front, naming the option and the bytes, instead of std::bad_alloc ------
bad batch_1e9 'batch 1000000000 x --seq 64 asks for .* more than this machine' \
  "$SHARDLAB" train --model tiny --steps 1 --batch 1000000000 --trace off
bad batch_1e9_float 'batch' "$SHARDLAB" train --model tiny --steps 1 --batch 1e9 --trace off
bad batch_int_max 'batch 2147483647 x --seq 64 asks for .* more than this machine' \
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
