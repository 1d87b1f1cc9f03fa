#!/usr/bin/env bash
# GPT-2 training speed on one lent GPU: ShardLab's step beside PyTorch's at the same shape, in one
# call on the same card (docs/gpu.md, "Speed on one GPU"). Run from the repository root there,
# with build-cuda/gpu-bundle carried (bench/gpu/bundle.sh). Writes to $OUT:
#   speed.json   the card (name, clocks, driver, CUDA and NCCL versions), the commands, and one row
#                per configuration: median step, tokens/s, MFU, tracker / pool / driver memory
#   speed.log    every run's output
# Configurations: CONFIGS (default below: strategy:param-dtype[:more,train,flags] at --ranks 1, e.g.
# no_shard:f32:--offload,optim), the shape
# BATCH x SEQ (8 x 1024), STEPS timed after WARMUP steps, PyTorch's MODES (bench/gpu/
# torch_gpt2_speed.py; empty: none). Each run has T_RUN seconds.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BUNDLE:-build-cuda/gpu-bundle}
OUT=${OUT:-/tmp/shardlab-gpu-speed}
BATCH=${BATCH:-8} SEQ=${SEQ:-1024} STEPS=${STEPS:-10} WARMUP=${WARMUP:-3} T_RUN=${T_RUN:-90}
CONFIGS=${CONFIGS:-"no_shard:f32 full_shard:f32 no_shard:bf16"}
MODES=${MODES-eager-fp32,eager-bf16,compile-bf16}
mkdir -p "$OUT"
if [ ! -x "$B/bin/shardlab" ]; then
  echo "gpu_speed.sh: $B/bin/shardlab is missing: run bench/gpu/bundle.sh and carry $B" >&2
  exit 2
fi
source bench/gpu/gpu_env.sh
LOG=$OUT/speed.log
: >"$LOG"
rows=()
for c in $CONFIGS; do
  IFS=: read -r s p extra <<<"$c"
  IFS=, read -r -a more <<<"$extra"
  tag=$s-$p${extra:+-$(tr -cd 'a-z0-9' <<<"$extra")}
  dir=/tmp/sl-speed-$tag
  cmd=(train --model gpt2 --device cuda --backend nccl --ranks 1 --strategy "$s" --param-dtype "$p"
       --batch "$BATCH" --seq "$SEQ" --steps $((STEPS + WARMUP)) --print-every 1 --seed 1337
       --run-dir "$dir" --overwrite ${more[@]+"${more[@]}"})
  echo "==== shardlab ${cmd[*]}" >>"$LOG"
  timeout "$T_RUN" "$B/bin/shardlab" "${cmd[@]}" >>"$LOG" 2>&1
  rc=$?
  rows+=("$(python3 - "$dir" "$tag" "$p" "$rc" "$WARMUP" "$BATCH" "$SEQ" "$LOG" "${cmd[*]}" <<'PY'
import json, re, statistics, sys
d, tag, p, rc, warm, B, T, log, cmd = sys.argv[1:]
row = {"name": f"shardlab/{tag}", "impl": "shardlab", "strategy": tag.split("-")[0],
       "param_dtype": p, "flags": cmd.split("--overwrite")[-1].strip(),
       "batch": int(B), "seq": int(T), "rc": int(rc), "command": "shardlab " + cmd}
try:
    steps = [json.loads(l) for l in open(f"{d}/rank0.jsonl") if '"kind":"step"' in l]
except OSError as e:
    steps = []
    row["error"] = str(e)
t = [e["step_time"] for e in steps[int(warm):]]
if t:
    n = 124439808
    fl = 6 * n + 12 * 12 * 768 * int(T)
    med = statistics.median(t)
    row.update(step_s_median=med, step_s_min=min(t), step_s_max=max(t), steps_timed=len(t),
               tokens_per_s=int(B) * int(T) / med, flops_per_token=fl, peak_flops=67e12,
               mfu=int(B) * int(T) / med * fl / 67e12, final_loss=steps[-1]["loss"])
text = open(log).read().split("==== shardlab " + cmd)[-1]
m = re.search(r"GPU memory: tracker peak ([\d.]+ \w+); pool reserved peak ([\d.]+ \w+) .*driver ([\d.]+ \w+) used of ([\d.]+ \w+)", text)
if m:
    row.update(tracker_peak=m[1], pool_reserved_peak=m[2], driver_used=m[3], driver_total=m[4])
print(json.dumps(row))
PY
)")
  echo "${rows[-1]}" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-28s %s" % (r["name"], "rc %d %8.0f tok/s  step %7.1f ms  MFU(fp32 peak) %5.1f%%  tracker %s pool %s driver %s" % (r["rc"], r.get("tokens_per_s",0), 1e3*r.get("step_s_median",0), 100*r.get("mfu",0), r.get("tracker_peak"), r.get("pool_reserved_peak"), r.get("driver_used"))))'
done
if [ -n "$MODES" ]; then
  echo "==== pytorch $MODES" >>"$LOG"
  timeout $((T_RUN * 3)) python3 bench/gpu/torch_gpt2_speed.py --batch "$BATCH" --seq "$SEQ" \
    --steps "$STEPS" --warmup "$WARMUP" --modes "$MODES" --out /tmp/torch_rows.json 2>&1 | tee -a "$LOG"
fi
python3 - "$OUT/speed.json" "${rows[@]}" <<'PY'
import json, subprocess, sys
def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e: return str(e)
gpu = sh("nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,memory.total --format=csv")
try:
    torch_rows = json.load(open("/tmp/torch_rows.json"))
except OSError:
    torch_rows = {"rows": []}
doc = {"gpu": gpu, "cuda_runtime": sh("python3 -c 'import torch;print(torch.version.cuda)'"),
       "nccl": sh("python3 -c 'import torch;print(\".\".join(map(str,torch.cuda.nccl.version())))'"),
       "nvcc": sh("nvcc --version | tail -2"), "torch": torch_rows.get("torch"),
       "shardlab": [json.loads(r) for r in sys.argv[2:]], "pytorch": torch_rows["rows"]}
json.dump(doc, open(sys.argv[1], "w"), indent=1)
PY
echo "gpu_speed.sh: $OUT/speed.json"
