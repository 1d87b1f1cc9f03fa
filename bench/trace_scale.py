#!/usr/bin/env python3
"""Large torch.profiler traces for timing `shardlab import` against Holistic Trace Analysis.

Real traces of long jobs run to hundreds of MB per rank; the committed fixtures are a few MB.
This writes a job of RANKS ranks whose every rank is TRACE's events repeated COPIES times, one
copy after another: each copy shifted in time by the trace's length, its ProfilerStep numbers
continued, its correlation and External ids made unique, and distributedInfo's rank and
world_size set. The result is a trace of the same event mix, COPIES times longer.

    python3 bench/trace_scale.py tests/data/torch_traces/nccl_ddp/rank0.json.gz \
        --copies 20 --ranks 2 --out build/trace-scale

Standard library only.
"""
import argparse
import gzip
import json
import os
import re
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def scaled(trace, copies):
    events = trace["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and "ts" in e]
    if not timed:
        sys.exit("trace_scale.py: the trace has no complete (ph X) events")
    start = min(e["ts"] for e in timed)
    length = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 1000.0  # 1 ms apart
    steps = [int(m.group(1)) for e in timed
             for m in [re.match(r"ProfilerStep#(\d+)$", e.get("name", ""))] if m]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    ids = [e["args"][k] for e in timed for k in ("correlation", "External id")
           if isinstance(e.get("args", {}).get(k), int)]
    id_span = (max(ids) + 1) if ids else 0
    out = [e for e in events if e.get("ph") != "X"]  # metadata once
    for c in range(copies):
        for e in timed:
            e2 = dict(e)
            e2["ts"] = e["ts"] + c * length
            m = re.match(r"ProfilerStep#(\d+)$", e.get("name", ""))
            if m:
                e2["name"] = f"ProfilerStep#{int(m.group(1)) + c * step_span}"
            if "args" in e:
                a = dict(e["args"])
                for k in ("correlation", "External id"):
                    if isinstance(a.get(k), int) and a[k] > 0:
                        a[k] += c * id_span
                e2["args"] = a
            out.append(e2)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="one rank's torch.profiler trace (.json or .json.gz)")
    ap.add_argument("--copies", type=int, default=20, help="times the trace is repeated")
    ap.add_argument("--ranks", type=int, default=2, help="ranks of the job written")
    ap.add_argument("--out", required=True, help="a new directory for rank<R>.json")
    args = ap.parse_args()
    if args.copies < 1 or args.ranks < 1:
        sys.exit("trace_scale.py: --copies and --ranks must be at least 1")
    if os.path.exists(args.out) and os.listdir(args.out):
        sys.exit(f"trace_scale.py: {args.out} exists and is not empty")
    os.makedirs(args.out, exist_ok=True)
    trace = load(args.trace)
    events = scaled(trace, args.copies)
    for r in range(args.ranks):
        t = {k: v for k, v in trace.items() if k != "traceEvents"}
        info = dict(t.get("distributedInfo", {}))
        info.update(rank=r, world_size=args.ranks)
        t["distributedInfo"] = info
        t["traceEvents"] = events
        path = os.path.join(args.out, f"rank{r}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(t, f)
        os.replace(path + ".tmp", path)
        print(f"{path}: {len(events)} events, {os.path.getsize(path) / 2**20:.1f} MiB",
              flush=True)


if __name__ == "__main__":
    main()
