#!/usr/bin/python3
"""Two `shardlab train --run-dir` runs' losses, step by step, within a tolerance.

    /usr/bin/python3 bench/gpu/compare_losses.py REFERENCE_RUN RUN [--tol 1e-4] [--steps N]

Reads the step events of rank 0 (REFERENCE_RUN/rank0.jsonl, RUN/rank0.jsonl: the world-mean
loss ShardLab prints) and prints one line per step with both losses and their difference. Exit
0 when both runs have the first N steps (default: all of the reference's) and every difference
is within --tol; 1 when one is not, naming the step; 2 when a run directory cannot be read.
Issue 16's first stage runs it on a CPU run against the same configuration on the GPU.
"""
import argparse
import json
import math
import os
import sys


def losses(run_dir):
    path = os.path.join(run_dir, "rank0.jsonl")
    out = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if '"kind":"step"' not in line:
                    continue
                try:
                    e = json.loads(line)
                    out[int(e["step"])] = float(e["loss"])
                except (ValueError, KeyError, TypeError) as err:
                    print("compare_losses: %s:%d: not a step event (%s)" % (path, n, err),
                          file=sys.stderr)
                    sys.exit(2)
    except OSError as err:
        print("compare_losses: %s: %s" % (path, err.strerror), file=sys.stderr)
        sys.exit(2)
    if not out:
        print("compare_losses: %s: no step events" % path, file=sys.stderr)
        sys.exit(2)
    return out


def main(argv):
    p = argparse.ArgumentParser(description="Compare two ShardLab runs' losses step by step.")
    p.add_argument("reference", help="run directory of the reference (the CPU run)")
    p.add_argument("run", help="run directory to check against it")
    p.add_argument("--tol", type=float, default=1e-4, help="largest |difference| allowed")
    p.add_argument("--steps", type=int, default=0, help="steps to compare (0: the reference's)")
    a = p.parse_args(argv)
    ref, run = losses(a.reference), losses(a.run)
    steps = sorted(ref)[:a.steps] if a.steps > 0 else sorted(ref)
    worst, bad = 0.0, []
    print("step  reference        run              |difference|")
    for s in steps:
        if s not in run:
            print("%4d  %.9f      (missing)" % (s, ref[s]))
            bad.append("step %d is missing from %s" % (s, a.run))
            continue
        d = abs(run[s] - ref[s])
        if math.isnan(d):
            d = math.inf
        worst = max(worst, d)
        mark = "" if d <= a.tol else "   > %g" % a.tol
        print("%4d  %.9f  %.9f  %.3g%s" % (s, ref[s], run[s], d, mark))
        if d > a.tol:
            bad.append("step %d: %.9f against %.9f (|difference| %.3g > %g)"
                       % (s, run[s], ref[s], d, a.tol))
    if bad:
        print("compare_losses: %s against %s: %s" % (a.run, a.reference, bad[0]), file=sys.stderr)
        return 1
    print("compare_losses: %d steps within %g (largest |difference| %.3g)" % (len(steps), a.tol,
                                                                              worst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
