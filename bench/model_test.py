#!/usr/bin/python3
"""ctest bench.model: bench_model's ceilings run and report what they measured.

    /usr/bin/python3 bench/model_test.py BIN_DIR WORK_DIR

- BM_FmaPeak at 256 bits has a FLOP/s above 0 where the CPU has AVX2 and FMA; at 512 bits where
  it has AVX-512F; where it lacks them, the row is an error naming the missing instructions (the
  flags come from /proc/cpuinfo, independently of the benchmark's own check);
- BM_StepGemms for `small` reports gemm_gflops and model_gflops above 0, the first below the
  second's bound: the GEMMs compute no more FLOPs than the model counts (causal blocks skipped).
Nothing here asserts a rate's size.
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


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def main():
    bin_dir, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "model.json")
    cmd = [os.path.join(bin_dir, "bench_model"),
           "--benchmark_filter=FmaPeak|StepGemms/small/B:4/T:128/block:0$",
           "--benchmark_min_time=0.01", "--benchmark_out_format=json", "--benchmark_out=" + out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit("bench_model failed (%d): %s" % (r.returncode, " ".join(cmd)))
    rows = {b["name"]: b for b in json.load(open(out))["benchmarks"]}
    flags = cpu_flags()
    for bits, need in ((256, {"avx2", "fma"}), (512, {"avx512f"})):
        row = rows.get("BM_FmaPeak/bits:%d" % bits)
        expect(row is not None, "a BM_FmaPeak/bits:%d row" % bits)
        if row is None:
            continue
        if row.get("error_occurred"):
            msg = row.get("error_message", "")
            expect("AVX" in msg, "bits:%d error names the instructions: %r" % (bits, msg))
            if flags is not None:
                expect(not need <= flags, "bits:%d refused although /proc/cpuinfo has %s" % (bits, sorted(need)))
        else:
            expect(row.get("FLOP/s", 0) > 0, "bits:%d FLOP/s > 0: %r" % (bits, row.get("FLOP/s")))
            if flags is not None:
                expect(need <= flags, "bits:%d ran although /proc/cpuinfo lacks %s" % (bits, sorted(need)))
    step = rows.get("BM_StepGemms/small/B:4/T:128/block:0")
    expect(step is not None and not step.get("error_occurred"), "a BM_StepGemms small row")
    if step is not None:
        g, m = step.get("gemm_gflops", 0), step.get("model_gflops", 0)
        expect(g > 0 and m > 0, "gemm_gflops and model_gflops > 0: %r, %r" % (g, m))
        # Same time, fewer FLOPs computed than counted: gemm_gflops < model_gflops.
        expect(g < m, "the causal blocks skip work: gemm_gflops %r < model_gflops %r" % (g, m))
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("bench_model: FMA peak and step GEMM rows as expected")


if __name__ == "__main__":
    main()
