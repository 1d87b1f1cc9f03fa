"""The simulator against published GPU training runs of GPT-2-architecture models.

    python3 bench/published_runs.py [--bin build/bin]

For each run: `shardlab simulate` with the run's model, GPUs, strategy, dtypes, micro-batch and
accumulation on the matching cluster preset, and a markdown table of published against predicted
tokens/s per GPU, MFU, the simulated rank's peak by category and whether it fits with the GPU's
headroom. docs/figures.py puts the table in docs/simulate-validation.md (figure published-runs);
`make sim-validate` prints it.

The calibration rows are the issue's: 8 x A100-SXM4-80GB, one node, bf16. llm.c
(karpathy/llm.c, scripts/run_gpt2_*.sh header comments): ZeRO-1, cuDNN flash attention, vocab
padded to 50304, bf16 parameters and gradients with fp32 master weights. MosaicML llm-foundry
(scripts/train/benchmarking/README.md, the A100 80GB table): MPT models with GPT-2 blocks, vocab
50368, FULL_SHARD, amp_bf16 with the DEFAULT mixed precision (bf16 compute, fp32 gradient
reduction), flash attention, no activation checkpointing. The check rows are other rows of the
same tables (A100 at other sequence lengths, and H100 80GB), not used for anything but this
comparison.
"""
import argparse
import os
import re
import subprocess
import sys

# name, source, cluster, L, C, NH, V, T, micro-batch per GPU, accumulation, strategy,
# reduce dtype, published tokens/s per GPU, role
LLMC = "llm.c"
MPT = "llm-foundry"
RUNS = [
    # llm.c: tokens/step / step time / 8 GPUs
    ("gpt2 124M", LLMC, "a100-80gb", 12, 768, 12, 50304, 1024, 64, 1, "shard_optim", "bf16",
     524288 / 0.300 / 8, "calibration"),
    ("gpt2 350M", LLMC, "a100-80gb", 24, 1024, 16, 50304, 1024, 64, 1, "shard_optim", "bf16",
     524288 / 0.820 / 8, "calibration"),
    ("gpt2 774M", LLMC, "a100-80gb", 36, 1280, 20, 50304, 1024, 32, 2, "shard_optim", "bf16",
     524288 / 1.7 / 8, "calibration"),
    ("gpt2 1558M", LLMC, "a100-80gb", 48, 1600, 25, 50304, 1024, 16, 8, "shard_optim", "bf16",
     1048576 / 7.0 / 8, "calibration"),
    ("mpt 125m", MPT, "a100-80gb", 12, 768, 12, 50368, 1024, 64, 2, "full_shard", "f32", 156468,
     "calibration"),
    ("mpt 125m", MPT, "a100-80gb", 12, 768, 12, 50368, 2048, 40, 2, "full_shard", "f32", 142830,
     "calibration"),
    ("mpt 350m", MPT, "a100-80gb", 24, 1024, 16, 50368, 1024, 64, 2, "full_shard", "f32", 64813,
     "calibration"),
    ("mpt 350m", MPT, "a100-80gb", 24, 1024, 16, 50368, 2048, 32, 2, "full_shard", "f32", 58782,
     "calibration"),
    ("mpt 760m", MPT, "a100-80gb", 24, 1536, 12, 50368, 2048, 24, 2, "full_shard", "f32", 32434,
     "calibration"),
    ("mpt 1b", MPT, "a100-80gb", 24, 2048, 16, 50368, 2048, 14, 4, "full_shard", "f32", 20513,
     "calibration"),
    # checks: the same tables' other rows
    ("mpt 125m", MPT, "a100-80gb", 12, 768, 12, 50368, 512, 128, 2, "full_shard", "f32", 165681,
     "check"),
    ("mpt 350m", MPT, "a100-80gb", 24, 1024, 16, 50368, 512, 128, 2, "full_shard", "f32", 69330,
     "check"),
    ("mpt 760m", MPT, "a100-80gb", 24, 1536, 12, 50368, 1024, 48, 2, "full_shard", "f32", 29765,
     "check"),
    ("mpt 1b", MPT, "a100-80gb", 24, 2048, 16, 50368, 1024, 18, 4, "full_shard", "f32", 22112,
     "check"),
    ("mpt 760m", MPT, "h100-sxm", 24, 1536, 12, 50368, 2048, 24, 2, "full_shard", "f32", 63147,
     "check"),
    ("mpt 760m", MPT, "h100-sxm", 24, 1536, 12, 50368, 1024, 48, 2, "full_shard", "f32", 78581,
     "check"),
    ("mpt 1b", MPT, "h100-sxm", 24, 2048, 16, 50368, 2048, 14, 1, "full_shard", "f32", 45455,
     "check"),
    ("mpt 1b", MPT, "h100-sxm", 24, 2048, 16, 50368, 1024, 18, 4, "full_shard", "f32", 48910,
     "check"),
]
GPUS = 8
SHORT = {"params": "params", "params_unsharded": "p_unsh", "grads": "grads",
         "grads_unsharded": "g_unsh", "optimizer_state": "optim", "activations": "activ",
         "workspace": "work"}


def command(run):
    name, src, cluster, L, C, NH, V, T, mb, acc, strategy, reduce, pub, role = run
    return (f"simulate --cluster {cluster} --model gpt2 --n-layer {L} --n-embd {C} --n-head {NH} "
            f"--vocab-size {V} --max-seq-len {T} --seq {T} --ranks {GPUS} "
            f"--batch {mb * GPUS * acc} --accum {acc} --strategy {strategy} --param-dtype bf16 "
            f"--reduce-dtype {reduce} --attention flash --steps 2 --trace off")


def gib(text):
    v, unit = text.split()
    return float(v) / {"B": 2**30, "KiB": 2**20, "MiB": 1024, "GiB": 1, "TiB": 1 / 1024}[unit]


def simulate(binary, run):
    cmd = [os.path.join(binary, "shardlab")] + command(run).split()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"bench/published_runs.py: `{' '.join(cmd)}` exited {out.returncode}:\n"
                 f"{out.stdout[-2000:]}")
    text = out.stdout

    def get(pattern):
        m = re.search(pattern, text)
        if not m:
            sys.exit(f"bench/published_runs.py: no '{pattern}' in the output of "
                     f"`{' '.join(cmd)}`:\n{text[-2000:]}")
        return m.group(1)
    cats = {c: gib(v) for c, v in re.findall(r"^    (\w+) +([0-9.]+ [KMGT]?i?B)$", text, re.M)}
    return {
        "tps": float(get(r"tokens/s +[0-9.]+ \(all ranks; ([0-9.]+) per rank\)")),
        "mfu": get(r"MFU +([0-9.]+%)"),
        "peak": gib(get(r"peak memory +([0-9.]+ [KMGT]?i?B) per rank")),
        "headroom": gib(get(r"with headroom ([0-9.]+ [KMGT]?i?B)")),
        "fits": "yes" if re.search(r": fits$", text, re.M) else "NO",
        "cats": cats,
    }


def table(binary):
    rows = ["| run | role | GPUs | T | micro-batch x accum | published tokens/s/GPU | predicted | "
            "predicted / published | MFU | peak GiB (largest categories) | + headroom | fits |",
            "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    ratios = {"calibration": [], "check": []}
    fits = {"calibration": 0, "check": 0}
    for run in RUNS:
        name, src, cluster, L, C, NH, V, T, mb, acc, strategy, reduce, pub, role = run
        r = simulate(binary, run)
        ratio = r["tps"] / pub
        ratios[role].append(ratio)
        fits[role] += r["fits"] == "yes"
        top = sorted(((v, c) for c, v in r["cats"].items() if v > 0), reverse=True)[:3]
        cats = ", ".join(f"{SHORT.get(c, c)} {v:.1f}" for v, c in top)
        gpu = "8 x A100 80GB" if cluster == "a100-80gb" else "8 x H100 80GB"
        rows.append(f"| {name} ({src}, {strategy}) | {role} | {gpu} | {T} | {mb} x {acc} | "
                    f"{pub:,.0f} | {r['tps']:,.0f} | {ratio:.2f} | {r['mfu']} | "
                    f"{r['peak']:.1f} ({cats}) | {r['headroom']:.1f} | {r['fits']} |")
    lines = rows + [""]
    for role in ("calibration", "check"):
        v = ratios[role]
        within = sum(1 for x in v if abs(x - 1) <= 0.10)
        lines.append(f"{role.capitalize()} rows: predicted / published {min(v):.2f} to "
                     f"{max(v):.2f}, {within} of {len(v)} within 10%; {fits[role]} of {len(v)} "
                     f"fit at the published micro-batch.")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin", help="the build's bin/ (its shardlab)")
    print(table(ap.parse_args().bin))


if __name__ == "__main__":
    main()
