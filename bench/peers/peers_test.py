#!/usr/bin/python3
"""ctest bench.peers: the parts of `make bench-peers` that need no PyTorch, on canned inputs.

    /usr/bin/python3 bench/peers/peers_test.py WORK_DIR

- run_peers.py's medians over repetitions (the rows bench/report.py reads);
- bench/report.py's "PyTorch beside ShardLab" section from canned JSON: tokens/s from the median
  step, RSS per rank (a local process divided by its N ranks), the ratios against the stronger
  peer and the targets marked met / NOT met;
- torch_peer.py's SplitMix64 against the published outputs of SplitMix64 from seed 0, and its
  llm.c token-file reader refusing a file that is not one;
- torch_peer.py's --bind: its default from SHARDLAB_BIND_TO, and a rank on the CPU
  plan_core_binding would give it (only with 2 or more ranks that fit);
- both scripts' --help without PyTorch, and run_peers.py refusing a missing binary (exit 2).
Nothing here measures time.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import run_peers  # noqa: E402
import torch_peer  # noqa: E402

FAILURES = []


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what)


def row(name, **counters):
    b = {"name": name, "run_name": name, "run_type": "iteration", "time_unit": "ms",
         "cpu_time": 10.0}
    b.update(counters)
    return b


def test_medians():
    rows = [row("a", step_ms_median=float(v), rss_peak=float(r), repetition_index=i)
            for i, (v, r) in enumerate([(1, 30), (5, 10), (3, 20)])]
    out = run_peers.with_medians(rows)
    med = [b for b in out if b.get("aggregate_name") == "median"]
    expect(len(out) == 4 and len(med) == 1, "with_medians: three rows and one median row")
    expect(med and med[0]["step_ms_median"] == 3.0 and med[0]["rss_peak"] == 20.0,
           "with_medians: the median of each counter (3 ms, 20 bytes), got %s" % med)


def test_report(work):
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    mib = 1024.0 * 1024.0
    shape = "ranks:2/batch:4/seq:128"
    sl = [row("train_step/local/full_shard/small/%s/manual_time" % shape, step_ms_median=100.0,
              rss_peak=200 * mib, peak=70 * mib),
          row("train_step/local/no_shard/small/%s/manual_time" % shape, step_ms_median=200.0,
              rss_peak=300 * mib, peak=90 * mib)]
    peers = [row("peer/torch_plain/ddp/small/%s/manual_time" % shape, step_ms_median=150.0,
                 rss_peak=800 * mib, loss_checked_steps=5.0, loss_max_diff=1e-7),
             row("peer/torch_hf/ddp/small/%s/manual_time" % shape, step_ms_median=160.0,
                 rss_peak=900 * mib, loss_checked_steps=5.0, loss_max_diff=1e-7),
             row("peer/torch_plain/fsdp2/small/%s/manual_time" % shape, step_ms_median=250.0,
                 rss_peak=1000 * mib, loss_checked_steps=5.0, loss_max_diff=2e-7)]
    for name, rows in (("peers_shardlab.json", sl), ("peers_torch.json", peers)):
        with open(os.path.join(data, name), "w") as f:
            json.dump({"context": {}, "benchmarks": run_peers.with_medians(rows)}, f)
    with open(os.path.join(data, "peers.log"), "w") as f:
        f.write("date 2026-01-01T00:00:00Z\nversions torch X\nshape canned\n"
                "load_before torch_plain_ddp_0 0.10 0.20 0.30\ncommand torch_plain_ddp_0 x\n"
                "load_after torch_plain_ddp_0 0.40 0.50 0.60\n"
                "bind core (canned)\n")
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "report.py"), data, work],
                       capture_output=True, text=True)
    expect(r.returncode == 0, "report.py on canned peers JSON: exit %d\n%s" % (r.returncode,
                                                                              r.stderr))
    if r.returncode != 0:
        return
    md = open(os.path.join(work, "report.md")).read()
    expect("## PyTorch beside ShardLab" in md, "report.md has the peers section")
    # 2 x 4 x 128 = 1024 tokens per step: 100 ms -> 10240 tokens/s.
    expect("| ShardLab local, full_shard | 100.0 | 10240 |" in md,
           "ShardLab's tokens/s from its median step (1024 tokens / 100 ms)")
    expect("100.00 (process / 2)" in md, "a local process's VmHWM divided by its 2 ranks")
    # full_shard: 150 / 100 = 1.50 x DDP (the faster plain model), 250 / 100 = 2.50 x FSDP2;
    # RSS 100 / 800 = 0.12 of DDP's smaller peer, 100 / 1000 = 0.10 of FSDP2's.
    expect("| local full_shard | 1.50 met | 2.50 met | 0.12 met | 0.10 met |" in md,
           "full_shard's ratios and targets")
    # no_shard: 150 / 200 = 0.75 x DDP, 1.25 x FSDP2; RSS 150 / 800 = 0.19, 0.15.
    expect("| local no_shard | 0.75 NOT met | 1.25 NOT met | 0.19 met | 0.15 met |" in md,
           "no_shard's ratios, targets not met marked so")
    expect("5 steps, max diff 2.0e-07" in md, "the loss check's column")
    expect("torch_plain_ddp_0 0.10 0.20 0.30 / 0.40 0.50 0.60" in md, "the load around a run")
    expect("- Ranks bound to CPUs: core (canned)" in md, "the binding of the run")


def test_bind():
    # The default follows SHARDLAB_BIND_TO, which turns ShardLab's own binding off too.
    old = os.environ.pop("SHARDLAB_BIND_TO", None)
    try:
        expect(torch_peer.default_bind() == "core", "--bind defaults to core")
        os.environ["SHARDLAB_BIND_TO"] = "none"
        expect(torch_peer.default_bind() == "none", "SHARDLAB_BIND_TO=none makes it none")
    finally:
        os.environ.pop("SHARDLAB_BIND_TO", None)
        if old is not None:
            os.environ["SHARDLAB_BIND_TO"] = old
    mask = os.sched_getaffinity(0)
    expect(torch_peer.bind_rank(0, 2, "none") is None, "--bind none binds nothing")
    expect(torch_peer.bind_rank(0, 1, "core") is None, "one rank is never bound")
    expect(torch_peer.bind_rank(0, len(mask) + 1, "core") is None,
           "ranks that do not fit on the CPUs are not bound")
    expect(os.sched_getaffinity(0) == mask, "nothing bound so far")
    if len(mask) >= 2:
        try:
            cpu = torch_peer.bind_rank(1, 2, "core")
            expect(cpu == sorted(mask)[1] and os.sched_getaffinity(0) == {cpu},
                   "rank 1 of 2 on the second allowed CPU, as plan_core_binding puts it")
        finally:
            os.sched_setaffinity(0, mask)


def test_torch_peer_pure_parts(work):
    # SplitMix64 from seed 0 (Vigna's reference splitmix64.c): the first three outputs.
    rng = torch_peer.SplitMix64(0)
    got = [rng.next_u64() for _ in range(3)]
    expect(got == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F],
           "SplitMix64(0): %s" % [hex(g) for g in got])
    bad = os.path.join(work, "not_tokens.bin")
    with open(bad, "wb") as f:
        f.write(b"\0" * 2048)
    try:
        torch_peer.read_token_file(bad)
        expect(False, "read_token_file accepted a file without the llm.c magic")
    except RuntimeError as e:
        expect("not an llm.c token file" in str(e), "read_token_file's message: %s" % e)
    good = os.path.join(work, "tokens.bin")
    header = [20240520, 1, 5] + [0] * 253
    with open(good, "wb") as f:
        f.write(b"".join(x.to_bytes(4, "little") for x in header))
        f.write(b"".join(t.to_bytes(2, "little") for t in (7, 300, 0, 65535, 2)))
    expect(torch_peer.read_token_file(good) == [7, 300, 0, 65535, 2], "read_token_file's tokens")
    # Two ranks of a global batch of 4 take rows 0-1 and 2-3 of the same window order.
    tokens = list(range(41))
    r0 = torch_peer.Loader(tokens, 2, 4, 0, 2, 1337)
    r1 = torch_peer.Loader(tokens, 2, 4, 1, 2, 1337)
    one = torch_peer.Loader(tokens, 4, 4, 0, 1, 1337)
    x0, y0 = r0.next()
    x1, _ = r1.next()
    xa, _ = one.next()
    expect(x0 + x1 == xa, "the ranks' rows together are one rank's global batch")
    expect(all(y[:-1] == x[1:] for x, y in zip(x0, y0)), "targets are the inputs shifted by one")
    starts = sorted(r0.window_start(g) for g in range(10))
    expect(starts == [4 * w for w in range(10)], "an epoch visits every window once: %s" % starts)


def test_help(work):
    for script in ("torch_peer.py", "run_peers.py"):
        r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, script), "--help"],
                           capture_output=True, text=True)
        expect(r.returncode == 0 and "--ranks" in r.stdout, "%s --help" % script)
    r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "run_peers.py"), "--bin",
                        os.path.join(work, "no-such-dir")], capture_output=True, text=True)
    expect(r.returncode == 2 and "not found" in r.stderr,
           "run_peers.py without binaries: exit 2 naming them (got %d: %s)"
           % (r.returncode, r.stderr.strip()))


def main():
    if len(sys.argv) != 2:
        print("usage: peers_test.py WORK_DIR", file=sys.stderr)
        return 2
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    test_medians()
    test_report(work)
    test_torch_peer_pure_parts(work)
    test_bind()
    test_help(work)
    print("bench.peers: %s" % ("%d failures" % len(FAILURES) if FAILURES else "all checks pass"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
