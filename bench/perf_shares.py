#!/usr/bin/env python3
"""Where a training step's time goes, from a `perf record` of bench_train_step.

Reads `perf report --sort pid,sym,srcfile` of a perf.data file, keeps the samples of the rank threads (the
N threads with the most samples: a local world's ranks, which run every step; the threads that
measure the sgemm ceiling around the row are left out) and prints the share of each group of
symbols among them as a Markdown table.

    perf record -F 999 -g -o after.data -- build/bin/bench_train_step ...
    python3 bench/perf_shares.py after.data --threads 2
"""
import argparse
import re
import subprocess
import sys
from collections import defaultdict

# (label, regex on "symbol @ source file"); the first match wins.
GROUPS = [
    ("OpenBLAS `sgemm_kernel`", r"^sgemm_kernel"),
    ("OpenBLAS small-matrix kernels (`sgemm_small_kernel_*`, no packing)", r"^sgemm_small_kernel"),
    ("OpenBLAS packing (`sgemm_*copy`)", r"^sgemm_\w*copy"),
    ("OpenBLAS `sgemm_beta` (C scaled or zeroed)", r"^sgemm_beta"),
    ("OpenBLAS, other", r"^(sgemm_|cblas_|blas_)"),
    ("GELU forward + backward (`gelu.cpp`)", r"@ gelu\.cpp"),
    ("LayerNorm forward + backward (`layernorm.cpp`)", r"@ layernorm\.cpp"),
    ("attention softmax forward + backward (`attention.cpp`)", r"@ attention\.cpp"),
    ("AdamW (`optim.cpp`)", r"@ optim\.cpp|adamw"),
    ("`memmove` (glibc)", r"memmove|memcpy"),
    ("`memset` (glibc)", r"memset"),
    ("residual, bias (`residual.cpp`)", r"@ residual\.cpp"),
    ("cross-entropy, encoder", r"@ (crossentropy|encoder)\.cpp"),
    ("parameter init (`params.cpp`, libm `log`, `sincos`)", r"@ params\.cpp|log|sincos"),
    ("local collectives (`reduce_rank_order`)", r"reduce_rank_order"),
    ("kernel (page faults, scheduling)", r"^\[k\]"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="perf.data file")
    ap.add_argument("--threads", type=int, default=2,
                    help="how many threads to keep: the ranks of the row (default 2)")
    ap.add_argument("--top", type=int, default=0, help="also list the N largest symbols")
    args = ap.parse_args()
    try:
        out = subprocess.run(["perf", "report", "-i", args.data, "--no-children", "-g", "none",
                              "--sort", "pid,sym,srcfile", "--stdio", "-t", "|"], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"perf_shares.py: perf report -i {args.data} failed: {e}")
    rows = []  # (percent, tid, symbol)
    line_re = re.compile(r"^\s*([0-9.]+)%\s*\|\s*(\d+):[^|]*\|(\[[.k]\])\s+([^|]*?)\s*\|(.*)$")
    for line in out.splitlines():
        m = line_re.match(line)
        if m:
            sym = m.group(4) if m.group(3) == "[.]" else "[k] " + m.group(4)
            src = m.group(5).strip()
            rows.append((float(m.group(1)), int(m.group(2)), f"{sym} @ {src}" if src else sym))
    if not rows:
        sys.exit(f"perf_shares.py: no samples in {args.data}")
    per_tid = defaultdict(float)
    for pct, tid, _ in rows:
        per_tid[tid] += pct
    keep = sorted(per_tid, key=per_tid.get, reverse=True)[:args.threads]
    total = sum(per_tid[t] for t in keep)
    groups, syms = defaultdict(float), defaultdict(float)
    for pct, tid, sym in rows:
        if tid not in keep:
            continue
        syms[sym] += pct
        label = next((lab for lab, rx in GROUPS if re.search(rx, sym)), "other")
        groups[label] += pct
    print(f"threads {', '.join(map(str, keep))}: {total:.1f}% of all samples")
    print()
    print("| symbols | share of the rank threads' samples |")
    print("| --- | --- |")
    for label, _ in GROUPS + [("other", "")]:
        if groups.get(label, 0) > 0:
            print(f"| {label} | {100 * groups[label] / total:.1f}% |")
    if args.top:
        print()
        for sym, pct in sorted(syms.items(), key=lambda kv: kv[1], reverse=True)[:args.top]:
            print(f"{100 * pct / total:6.2f}%  {sym}")


if __name__ == "__main__":
    main()
