#!/usr/bin/env python3
"""Time per step in each kind of span of a run directory, per rank.

Reads RUN/rank*.jsonl (what `shardlab train` writes) and prints, for every rank and span (the
compute spans forward, backward, optimizer; the collectives by op), the span time summed over
the steps after the first and divided by their number, in ms. Collectives are timed from start
to end, so they overlap compute: their rows are not a share of the step.

    build/bin/shardlab train --ranks 2 --model small --steps 12 --run-dir R --overwrite
    python3 bench/span_times.py R
"""
import argparse
import glob
import json
import os
import sys
from collections import defaultdict


def rank_times(path):
    """(steps after the first, {(lane, op): ms summed over those steps}) of one rank's trace."""
    events = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as err:
                sys.exit(f"span_times: {path}:{n}: not a JSON line ({err.msg})")
    step_ends = sorted(e["t"] for e in events if e.get("kind") == "step")
    if len(step_ends) < 2:
        sys.exit(f"span_times: {path}: {len(step_ends)} steps; want 2 or more (the first is "
                 "left out as warm-up)")
    first_end = step_ends[0]
    total = defaultdict(float)
    for e in events:
        if e.get("kind") == "span" and e["t_start"] >= first_end:
            total[(e["lane"], e["op"])] += (e["t_end"] - e["t_start"]) / 1e6
    return len(step_ends) - 1, total


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory with rank*.jsonl")
    a = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(a.run, "rank*.jsonl")))
    if not paths:
        sys.exit(f"span_times: {a.run}: no rank*.jsonl (a run directory of `shardlab train`?)")
    ranks = [(os.path.basename(p)[len("rank"):-len(".jsonl")], rank_times(p)) for p in paths]
    print("rank  lane     span              ms per step")
    for rank, (steps, total) in ranks:
        for (lane, op), ms in sorted(total.items()):
            print(f"{rank:<5} {lane:<8} {op:<17} {ms / steps:10.2f}")


if __name__ == "__main__":
    main()
