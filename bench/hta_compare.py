#!/usr/bin/env python3
"""`shardlab import` checked against Holistic Trace Analysis on the same GPU traces.

For each directory of torch.profiler traces (one job's ranks): ShardLab imports it and its
summary.json gives each rank's compute time (the union of its compute kernels) and the share of
its communication time that compute overlaps (1 - exposed / comm); HTA's TraceAnalysis of the
same directory gives get_temporal_breakdown's compute_time and get_comm_comp_overlap's ratio, the
same two definitions. HTA leaves the last profiled step out unless told otherwise; here it is
told to keep it (include_last_profiler_step=True), as the import does, and its rounding of
event times to whole microseconds is turned off (HTA_DISABLE_NS_ROUNDING=1; --hta-rounding
keeps it). Both are timed, each in a process of its own, with its peak resident memory.

    build/peers-venv/bin/python bench/hta_compare.py --shardlab build/bin/shardlab \
        tests/data/torch_traces/nccl_ddp tests/data/torch_traces/nccl_subset

Prints a Markdown table; exits 1 when a rank's compute time differs by more than 1% or its
overlap by more than 1 percentage point. Needs holistictraceanalysis (bench/peers/
requirements.txt, installed into build/peers-venv by make bench-peers).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HTA_CHILD = r"""
import json, logging, sys, time, resource
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
load = time.perf_counter() - t0
b = a.get_temporal_breakdown(visualize=False)
o = a.get_comm_comp_overlap(visualize=False)
ranks = {int(r["rank"]): {"compute_us": float(r["compute_time(us)"])} for _, r in b.iterrows()}
for _, r in o.iterrows():
    ranks[int(r["rank"])]["overlap"] = float(r["comp_comm_overlap_pctg"]) / 100  # 2 decimals
# HTA parses the ranks in worker processes: the largest of them and this one.
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
print(json.dumps({"load_s": load, "peak_mib": rss, "ranks": ranks}))
"""


def run_hta(trace_dir, rounding):
    # By default HTA moves every event's start up and its end down to whole microseconds (its
    # workaround for overlapping events of older PyTorch): about 1 us less per kernel. Off
    # unless --hta-rounding, so that both read the trace's own times.
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="0" if rounding else "1")
    p = subprocess.run([sys.executable, "-c", HTA_CHILD, trace_dir], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"hta_compare.py: HTA failed on {trace_dir}:\n{p.stderr[-2000:]}")
    h = json.loads(p.stdout.strip().split("\n")[-1])
    h["ranks"] = {int(k): v for k, v in h["ranks"].items()}  # JSON made the keys strings
    return h


def run_shardlab(shardlab, trace_dir, out):
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", shardlab, "import", trace_dir, "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"hta_compare.py: shardlab import {trace_dir} failed:\n{p.stderr}")
    peak_mib = int(p.stderr.strip().split("\n")[-1]) / 1024
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "meta.json")) as f:
        rows = [s["rank"] for s in json.load(f)["imported"]["sources"]]
    ranks = {}
    for r in summary["ranks"]:
        comm, exposed = r["comm_ns"], r["exposed_comm_ns"]
        ranks[rows[r["rank"]]] = {"compute_us": r["compute_ns"] / 1e3,
                                  "overlap": 1 - exposed / comm if comm > 0 else 0.0}
    return {"load_s": wall, "peak_mib": peak_mib, "ranks": ranks}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help="directories of one job's traces")
    ap.add_argument("--shardlab", default="build/bin/shardlab")
    ap.add_argument("--hta-rounding", action="store_true",
                    help="leave HTA's rounding of event times to whole microseconds on")
    ap.add_argument("--timing-only", action="store_true",
                    help="compare load time and memory only (for large traces)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="hta_compare.")
    bad = 0
    rows = ["| traces | rank | compute ms, ShardLab | HTA | ratio | overlap, ShardLab | HTA | "
            "difference |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    speed = ["| traces | MiB on disk | ShardLab import | peak memory | HTA TraceAnalysis load | "
             "peak memory | HTA / ShardLab |", "| --- | --- | --- | --- | --- | --- | --- |"]
    try:
        for d in args.traces:
            name = os.path.basename(os.path.normpath(d))
            s = run_shardlab(args.shardlab, d, os.path.join(work, name))
            h = run_hta(d, args.hta_rounding)
            mib = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2**20
            speed.append(f"| `{name}` | {mib:.1f} | {s['load_s']:.2f} s | {s['peak_mib']:.0f} MiB "
                         f"| {h['load_s']:.2f} s | {h['peak_mib']:.0f} MiB | "
                         f"{h['load_s'] / s['load_s']:.1f}x |")
            if args.timing_only:
                continue
            for rank in sorted(s["ranks"]):
                a, b = s["ranks"][rank], h["ranks"].get(rank)
                if b is None:
                    sys.exit(f"hta_compare.py: HTA has no rank {rank} in {d}")
                ratio = a["compute_us"] / b["compute_us"]
                diff = 100 * (a["overlap"] - b["overlap"])
                ok = abs(ratio - 1) <= 0.01 and abs(diff) <= 1.0
                bad += not ok
                rows.append(f"| `{name}` | {rank} | {a['compute_us'] / 1e3:.3f} | "
                            f"{b['compute_us'] / 1e3:.3f} | {ratio:.4f} | "
                            f"{100 * a['overlap']:.2f}% | {100 * b['overlap']:.2f}% | "
                            f"{diff:+.2f} points{'' if ok else ' (outside the bound)'} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.timing_only:
        print("\n".join(rows) + "\n")
    print("\n".join(speed))
    cpu = os.cpu_count()
    print(f"\n(load average {' '.join(open('/proc/loadavg').read().split()[:3])}, {cpu} cores)")
    if bad:
        print(f"hta_compare.py: {bad} rank(s) outside 1% compute / 1 point overlap",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
