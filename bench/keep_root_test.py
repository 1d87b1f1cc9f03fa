#!/usr/bin/python3
"""ctest bench.keep_root: bench_train_step's --keep_root reaches the engine.

    /usr/bin/python3 bench/keep_root_test.py BIN_DIR WORK_DIR

One timed full_shard step of `tiny` at 2 ranks with --keep_root=0 and with --keep_root=1
(`make bench-peers` runs the latter, as FSDP2 keeps its root): the JSON row says which it ran, and
the root's second all-gather is gone from the bytes sent per step, exactly the root's shard times
N - 1 (docs/fsdp.md, "The unit lifecycle"), while the tracked peak stays the same. A
malformed value is refused with exit 2. Nothing here measures time.
"""
import json
import os
import subprocess
import sys

FAILURES = []


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what)


def run_row(bench, work, keep_root):
    out = os.path.join(work, "keep_root_%d.json" % keep_root)
    cmd = [bench, "--presets=tiny", "--ranks=2", "--batch=2", "--seq=32", "--warmup=0",
           "--steps=1", "--ceiling_size=64", "--keep_root=%d" % keep_root,
           "--benchmark_filter=^train_step/local/full_shard/tiny/ranks:2/prefetch:1/",
           "--benchmark_out_format=json", "--benchmark_out=" + out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit("bench_train_step failed (%d): %s" % (r.returncode, " ".join(cmd)))
    rows = [b for b in json.load(open(out))["benchmarks"] if not b.get("error_occurred")]
    if len(rows) != 1:
        sys.exit("expected one full_shard row in %s, found %d" % (out, len(rows)))
    return rows[0]


def main():
    bin_dir, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    bench = os.path.join(bin_dir, "bench_train_step")
    off, on = run_row(bench, work, 0), run_row(bench, work, 1)
    expect(off["keep_root"] == 0 and on["keep_root"] == 1,
           "the rows report keep_root 0 and 1, got %s and %s" % (off["keep_root"], on["keep_root"]))
    # tiny (core/model/config.cpp): V 256, T_max 64, C 64. Its root unit holds wte (V x C), wpe
    # (T_max x C) and ln_f (2 C), its flat buffer padded to a multiple of N; an all-gather sends
    # each rank's shard to the N - 1 others.
    n, v, t_max, c = 2, 256, 64, 64
    root = v * c + t_max * c + 2 * c
    padded = -(-root // n) * n
    expected = padded // n * (n - 1) * 4
    saved = off["comm_bytes"] - on["comm_bytes"]
    expect(saved == expected, "keep_root sends one root all-gather less: %d bytes, not %d "
           "(%s against %s)" % (expected, saved, on["comm_bytes"], off["comm_bytes"]))
    expect(on["peak"] == off["peak"], "the tracked peak is the same: %s against %s"
           % (on["peak"], off["peak"]))
    r = subprocess.run([bench, "--keep_root=x"], capture_output=True, text=True)
    expect(r.returncode == 2 and "--keep_root" in r.stderr,
           "--keep_root=x is refused with exit 2, naming the flag (got %d: %s)"
           % (r.returncode, r.stderr.strip()))
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("bench.keep_root: ok (root kept: %d of %d bytes per step not sent)"
          % (saved, off["comm_bytes"]))


if __name__ == "__main__":
    main()
