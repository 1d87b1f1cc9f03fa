#!/usr/bin/python3
"""ctest bench.memcpy_rounds: bench_collectives --memcpy_rounds pairs a collective with memcpy.

    /usr/bin/python3 bench/memcpy_rounds_test.py BIN_DIR WORK_DIR

A local all_reduce of 1 MiB at 2 ranks, 6 timed calls:
- without the flag the row has no memcpy counters (the collective is timed as before);
- with --memcpy_rounds=3 it has 3 rounds, a memcpy rate above 0, and the median round's
  busbw / memcpy between the lowest and the highest round's;
- with more rounds than calls (--memcpy_rounds=5 --calls=2) there is one round per call;
- a malformed or out-of-range value is refused with exit 2, naming the flag.
Nothing here asserts a time or a ratio's size.
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


def run_row(bench, work, name, *flags):
    out = os.path.join(work, name + ".json")
    cmd = [bench, "--benchmark_filter=^all_reduce/local/bytes:1048576/ranks:2/",
           "--benchmark_out_format=json", "--benchmark_out=" + out] + list(flags)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit("bench_collectives failed (%d): %s" % (r.returncode, " ".join(cmd)))
    rows = [b for b in json.load(open(out))["benchmarks"] if not b.get("error_occurred")]
    if len(rows) != 1:
        sys.exit("expected one all_reduce row in %s, found %d" % (out, len(rows)))
    return rows[0]


def main():
    bin_dir, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    bench = os.path.join(bin_dir, "bench_collectives")

    plain = run_row(bench, work, "plain", "--calls=6")
    expect("memcpy_frac" not in plain and "memcpy_bw" not in plain,
           "without --memcpy_rounds the row has no memcpy counters: %s" % sorted(plain))
    expect(plain["busbw"] > 0, "the plain row has a busbw: %s" % plain.get("busbw"))

    paired = run_row(bench, work, "paired", "--calls=6", "--memcpy_rounds=3")
    for k in ("memcpy_rounds", "memcpy_bw", "memcpy_frac", "memcpy_frac_min", "memcpy_frac_max"):
        expect(k in paired, "with --memcpy_rounds=3 the row has %s" % k)
    if not FAILURES:
        expect(paired["memcpy_rounds"] == 3, "3 rounds, not %s" % paired["memcpy_rounds"])
        expect(paired["memcpy_bw"] > 0, "a memcpy rate above 0: %s" % paired["memcpy_bw"])
        expect(0 < paired["memcpy_frac_min"] <= paired["memcpy_frac"] <= paired["memcpy_frac_max"],
               "the median round lies between the lowest and the highest: %s <= %s <= %s"
               % (paired["memcpy_frac_min"], paired["memcpy_frac"], paired["memcpy_frac_max"]))
        expect(paired["busbw"] > 0, "the paired row keeps its busbw: %s" % paired["busbw"])

    few = run_row(bench, work, "few", "--calls=2", "--memcpy_rounds=5")
    expect(few.get("memcpy_rounds") == 2,
           "more rounds than calls: one round per call (2), not %s" % few.get("memcpy_rounds"))

    for bad in ("--memcpy_rounds=x", "--memcpy_rounds=101", "--memcpy_rounds=-1"):
        r = subprocess.run([bench, bad, "--benchmark_filter=none"], capture_output=True,
                           text=True)
        expect(r.returncode == 2 and bad in r.stderr,
               "%s exits 2 naming the flag (got %d: %s)" % (bad, r.returncode, r.stderr.strip()))

    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("bench.memcpy_rounds: ok")


if __name__ == "__main__":
    main()
