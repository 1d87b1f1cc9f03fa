#!/usr/bin/env python3
"""The GPU speed table of docs/gpu.md: what bench/gpu/gpu_speed.sh measured on a lent GPU (its JSON,
kept in docs/bench/data/) beside what `shardlab simulate` predicts for the same configuration on
the cluster preset of that GPU, run here (no GPU needed).

    python3 bench/gpu/gpu_report.py docs/bench/data/gpu_h100.json --shardlab build/bin/shardlab \\
        [--cluster h100-sxm]

Prints a Markdown table: one row per configuration measured (ShardLab's and PyTorch's), then for
ShardLab's rows the simulator's step time, tokens/s and peak memory per rank, and the ratios
measured / predicted.
"""
import argparse
import json
import re
import subprocess
import sys


def simulate(shardlab, cluster, row):
    cmd = [shardlab, "simulate", "--cluster", cluster, "--ranks", "1", "--model", "gpt2",
           "--strategy", row["strategy"], "--param-dtype", row["param_dtype"],
           "--batch", str(row["batch"]), "--seq", str(row["seq"]), "--steps", "3",
           "--trace", "off"] + row.get("flags", "").split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"gpu_report.py: {' '.join(cmd)} failed: {p.stderr.strip()}")
    step = re.search(r"step time\s+([\d.]+) ms", p.stdout)
    tok = re.search(r"tokens/s\s+(\d+)", p.stdout)
    peak = re.search(r"peak memory\s+([\d.]+ \w+) per rank", p.stdout)
    if not (step and tok and peak):
        sys.exit("gpu_report.py: could not read step time, tokens/s and peak memory from: "
                 + " ".join(cmd))
    return {"step_ms": float(step[1]), "tokens_per_s": float(tok[1]), "peak": peak[1],
            "command": "shardlab " + " ".join(cmd[1:])}


def gib(text_or_bytes):
    if isinstance(text_or_bytes, (int, float)):
        return f"{text_or_bytes / 2**30:.2f} GiB"
    return text_or_bytes or "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--shardlab", default="build/bin/shardlab")
    ap.add_argument("--cluster", default="h100-sxm")
    a = ap.parse_args()
    try:
        d = json.load(open(a.json))
    except (OSError, ValueError) as e:
        sys.exit(f"gpu_report.py: {a.json}: {e}")
    gpu = d["gpu"].splitlines()[-1].split(", ")
    print(f"{gpu[0]}, driver {gpu[1]}, SM clock {gpu[2]} (max {gpu[3]}), CUDA {d['cuda_runtime']},"
          f" NCCL {d['nccl']}, PyTorch {d['torch']}; {d['date']}. B {d['shardlab'][0]['batch']},"
          f" T {d['shardlab'][0]['seq']}, 1 rank.\n")
    print("| run | step ms | tokens/s | MFU | peak: tracker / allocated | pool reserved "
          "| driver used | simulated step ms | simulated peak | measured / simulated tokens/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in d["shardlab"]:
        s = simulate(a.shardlab, a.cluster, r)
        flags = f", {r['flags']}" if r.get("flags") else ""
        print(f"| ShardLab {r['strategy']}, params {r['param_dtype']}{flags} "
              f"| {1e3 * r['step_s_median']:.1f} | {r['tokens_per_s']:.0f} "
              f"| {100 * r['mfu']:.1f}% (fp32) | {r['tracker_peak']} | {r['pool_reserved_peak']} "
              f"| {r['driver_used']} | {s['step_ms']:.1f} | {s['peak']} "
              f"| {r['tokens_per_s'] / s['tokens_per_s']:.2f} |")
    for r in d["pytorch"]:
        if "error" in r:
            print(f"| {r['name']} | failed: {r['error'][:60]} | | | | | | | | |")
            continue
        peak = "bf16" if r["precision"] == "bf16" else "fp32"
        print(f"| PyTorch {r['mode']} {r['precision']} | {1e3 * r['step_s_median']:.1f} "
              f"| {r['tokens_per_s']:.0f} | {100 * r['mfu']:.1f}% ({peak}) "
              f"| {gib(r['peak_allocated_bytes'])} | {gib(r['peak_reserved_bytes'])} | - | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
