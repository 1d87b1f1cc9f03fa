#!/usr/bin/python3
"""PyTorch beside ShardLab on the same shapes: `make bench-peers`.

    /usr/bin/python3 bench/peers/run_peers.py --bin build/bin --out docs/bench

1. A virtual environment with PyTorch (--venv, default build/peers-venv): created with
   `python3 -m venv` and bench/peers/requirements.txt from PyPI when it lacks torch, else reused.
2. The same start for both sides: `shardlab data encode` turns data/fsdp_notes.txt into a token
   file; one step at lr 0 and `shardlab export` write ShardLab's initial weights (seed 1337) as
   safetensors. Two `shardlab train --init-from` runs (no_shard, full_shard) record the first
   losses on those batches; each PyTorch run starts from the same file, reads the same batches and
   fails unless its first losses match them within 1e-4 (bench/peers/torch_peer.py).
3. --repetitions rounds, each one run of every system in turn: ShardLab local and MPI
   (bench_train_step, one process per row) no_shard and full_shard, and PyTorch DDP and FSDP2
   (fully_shard per block and on the root) on gloo, one process per rank, for each --impls.
   ShardLab's full_shard keeps its root gathered from the loss into the backward
   (`--keep_root=1`, `train --keep-root`), as FSDP2 does with its root: the same collectives.
4. OUT/data/peers_shardlab.json and peers_torch.json (Google Benchmark JSON, every repetition and
   their medians), OUT/data/peers.log (machine, versions, load, exact commands), then
   bench/report.py OUT/data OUT, whose "PyTorch beside ShardLab" section compares them.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

import torch_peer  # noqa: E402 (its module level needs no torch: default_bind)

STRATEGIES = [("no_shard", "ddp"), ("full_shard", "fsdp2")]  # ShardLab's and the peer's names
# FSDP2 leaves its root unsharded after the forward (its backward starts at once): ShardLab's
# --keep-root. bench_train_step's --keep_root=1 applies it only where a strategy gathers per unit.
KEEP_ROOT = {"no_shard": [], "full_shard": ["--keep-root"]}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Train ShardLab's GPT with ShardLab (local, MPI) and PyTorch (DDP, FSDP2 on "
                    "gloo) at the same shapes; write Google Benchmark JSON and the report.")
    p.add_argument("--bin", default="build/bin", help="shardlab and bench_train_step")
    p.add_argument("--out", default="docs/bench", help="report.md here, the JSON in OUT/data")
    p.add_argument("--work", default="build/peers", help="scratch: token file, weights, runs")
    p.add_argument("--venv", default="build/peers-venv", help="the PyTorch environment")
    p.add_argument("--preset", default="small", help="tiny | small | medium")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--seq", type=int, default=128, help="T")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before the timed ones")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run")
    p.add_argument("--repetitions", type=int, default=5,
                   help="rounds of every run, alternated; report.md gives the FSDP2 ratio of each")
    p.add_argument("--check-steps", type=int, default=5, help="first losses compared")
    p.add_argument("--impls", default="plain,hf",
                   help="PyTorch models: plain (GPT-2 in plain torch), hf (transformers)")
    p.add_argument("--adamw", default="default", choices=["default", "foreach", "fused"],
                   help="PyTorch's AdamW implementation (torch_peer.py --adamw)")
    p.add_argument("--bind", default=torch_peer.default_bind(), choices=["core", "none"],
                   help="core: every rank on a CPU of its own on both sides (ShardLab's default, "
                        "mpirun --bind-to core, torch_peer.py --bind core); none: every rank left "
                        "to the scheduler (SHARDLAB_BIND_TO=none, --bind-to none) (default: core, "
                        "or none when SHARDLAB_BIND_TO=none)")
    p.add_argument("--no-mpi", action="store_true", help="skip ShardLab's MPI rows")
    p.add_argument("--no-report", action="store_true", help="only run and write the JSON")
    a = p.parse_args(argv)
    for k in ("ranks", "batch", "seq", "steps", "repetitions", "check_steps"):
        if getattr(a, k) < 1:
            p.error("--%s must be at least 1" % k.replace("_", "-"))
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    a.impls = [i for i in a.impls.split(",") if i]
    if not a.impls or any(i not in ("plain", "hf") for i in a.impls):
        p.error("--impls: a comma-separated list of plain and hf")
    for b in ("shardlab", "bench_train_step"):
        if not os.access(os.path.join(a.bin, b), os.X_OK):
            p.error("%s/%s not found: build it first (make build)" % (a.bin, b))
    return a


class Log:
    """OUT/data/peers.log: the lines report.py reads (as bench/run_bench.sh's run.log)."""

    def __init__(self, path):
        self.f = open(path, "w")

    def line(self, key, text):
        self.f.write("%s %s\n" % (key, text))
        self.f.flush()


def load_avg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, log=None, tag=None, env=None):
    """Runs cmd (a list), echoing it; with a log, records the command and the load around it.
    A failure ends this script with the command's status."""
    # Paths inside the checkout are written relative to it (the commands run from its root).
    line = " ".join(shlex.quote(os.path.relpath(c, ROOT) if c.startswith(ROOT + os.sep) else c)
                    for c in cmd)
    print("== " + line, flush=True)
    if log:
        log.line("load_before", "%s %s" % (tag, load_avg()))
        coretype = os.environ.get("OPENBLAS_CORETYPE")
        log.line("command", "%s OPENBLAS_NUM_THREADS=1 %s%s%s" % (
            tag, "OPENBLAS_CORETYPE=%s " % coretype if coretype else "",
            "".join("%s=%s " % kv for kv in sorted((env or {}).items())), line))
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", **(env or {}))
    r = subprocess.run(cmd, env=e)
    if log:
        log.line("load_after", "%s %s" % (tag, load_avg()))
    if r.returncode != 0:
        print("run_peers.py: failed (%d): %s" % (r.returncode, line), file=sys.stderr)
        sys.exit(1)


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import torch, safetensors"],
                                             capture_output=True).returncode == 0:
        print("run_peers.py: using %s" % venv)
        return py
    print("run_peers.py: creating %s (PyTorch from PyPI: a few minutes, about 6 GB)" % venv)
    if subprocess.run(["python3", "-m", "venv", venv]).returncode != 0:
        sys.exit("run_peers.py: python3 -m venv failed: install Debian's python3-venv (make deps)")
    run([py, "-m", "pip", "install", "-q", "-r", os.path.join(HERE, "requirements.txt")])
    return py


def versions(py):
    code = ("import torch, transformers, safetensors; print('torch %s, transformers %s, "
            "safetensors %s' % (torch.__version__, transformers.__version__, "
            "safetensors.__version__))")
    return subprocess.run([py, "-c", code], capture_output=True, text=True).stdout.strip()


# ---- JSON ----------------------------------------------------------------------------------------

def with_medians(rows):
    """Google Benchmark's layout for repetitions: every row, then per run_name a "median" row with
    the median of every numeric field (what bench/report.py reads when it is there)."""
    out = list(rows)
    names = []
    for r in rows:
        if r["run_name"] not in names:
            names.append(r["run_name"])
    for n in names:
        reps = [r for r in rows if r["run_name"] == n]
        m = {"name": n + "_median", "run_name": n, "run_type": "aggregate",
             "aggregate_name": "median", "repetitions": len(reps),
             "time_unit": reps[0].get("time_unit", "ms")}
        for k, v in reps[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in m:
                m[k] = statistics.median(r[k] for r in reps if k in r)
        out.append(m)
    return out


def collect(paths):
    """The iteration rows of several Google Benchmark JSON files, with their repetition index."""
    rows, context = [], {}
    for rep, path in paths:
        with open(path) as f:
            doc = json.load(f)
        context = context or doc.get("context", {})
        for b in doc.get("benchmarks", []):
            if b.get("error_occurred"):
                sys.exit("run_peers.py: %s: %s failed: %s"
                         % (path, b["name"], b.get("error_message", "")))
            if b.get("run_type", "iteration") == "iteration":
                b = dict(b, repetition_index=rep)
                rows.append(b)
    return rows, context


def write_json(path, rows, context):
    with open(path, "w") as f:
        json.dump({"context": context, "benchmarks": with_medians(rows)}, f, indent=1)
    print("run_peers.py: wrote %s (%d rows)" % (path, len(rows)))


# ---- the run -------------------------------------------------------------------------------------

def main():
    a = parse_args(sys.argv[1:])
    data = os.path.join(a.out, "data")
    os.makedirs(data, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    py = ensure_venv(a.venv)
    shardlab = os.path.join(a.bin, "shardlab")
    bench = os.path.join(a.bin, "bench_train_step")

    log = Log(os.path.join(data, "peers.log"))
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = [ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")]
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"
    log.line("date", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    log.line("machine_cpu", model[0] if model else "unknown")
    log.line("machine_cores", str(os.cpu_count()))
    # The kernels OpenBLAS picked for ShardLab's binaries (OPENBLAS_CORETYPE: the Makefile's choice
    # on AMD Zen 4, or yours).
    said = subprocess.run([bench, "--help"], capture_output=True, text=True,
                          env=dict(os.environ, OPENBLAS_VERBOSE="2"))
    said = said.stdout + said.stderr
    core = [ln.split(":", 1)[1].strip() for ln in said.splitlines() if ln.startswith("Core:")]
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    log.line("blas_core", (core[0] if core else "unknown") +
             (" (OPENBLAS_CORETYPE=%s)" % coretype if coretype else ""))
    log.line("git", git)
    log.line("versions", versions(py))
    log.line("shape", "preset %s, %d ranks, %d x %d tokens per rank, %d warm-up + %d timed steps; "
                      "repetitions: %d" % (a.preset, a.ranks, a.batch, a.seq, a.warmup, a.steps,
                                          a.repetitions))

    # The same start: tokens, weights, and ShardLab's first losses on them.
    tokens = os.path.join(a.work, "notes.bin")
    weights = os.path.join(a.work, "init.safetensors")
    ckpt = os.path.join(a.work, "init-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    run([shardlab, "data", "encode", os.path.join(ROOT, "data", "fsdp_notes.txt"), tokens], log,
        "setup")
    run([shardlab, "train", "--model", a.preset, "--ranks", "1", "--batch", "1", "--seq",
         str(a.seq), "--data", tokens, "--steps", "1", "--lr", "0", "--trace", "off",
         "--save-every", "1", "--ckpt-dir", ckpt, "--keep-last", "1"], log, "setup")
    run([shardlab, "export", ckpt, weights], log, "setup")
    optim = ["--lr", "1e-3", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8",
             "--weight-decay", "0", "--seed", "1337"]
    checks = {}
    for s, _ in STRATEGIES:
        checks[s] = os.path.join(a.work, "check-" + s)
        run([shardlab, "train", "--model", a.preset, "--ranks", str(a.ranks), "--batch",
             str(a.batch * a.ranks), "--seq", str(a.seq), "--data", tokens, "--steps",
             str(a.check_steps), "--init-from", weights, "--warmup", "0", "--schedule",
             "constant", "--clip", "0", "--strategy", s, "--run-dir", checks[s],
             "--overwrite"] + KEEP_ROOT[s] + optim, log, "check_" + s)

    shape = ["--presets=" + a.preset, "--ranks=%d" % a.ranks, "--batch=%d" % a.batch,
             "--seq=%d" % a.seq, "--warmup=%d" % a.warmup, "--keep_root=1"]
    mpi_flags = os.environ.get("SHARDLAB_MPIRUN_FLAGS",
                               "--oversubscribe --mca btl self,vader").split()
    if os.getuid() == 0:
        mpi_flags.append("--allow-run-as-root")
    # Every rank on a CPU of its own on all three sides, or none of them (--bind).
    mpi_flags += ["--bind-to", a.bind]
    sl_env = {"SHARDLAB_BIND_TO": a.bind}
    log.line("bind", "%s (ShardLab local SHARDLAB_BIND_TO=%s, mpirun --bind-to %s, torch_peer.py "
             "--bind %s)" % (a.bind, a.bind, a.bind, a.bind))
    mpi = not a.no_mpi and subprocess.run(["which", "mpirun"], capture_output=True).returncode == 0
    if not mpi:
        log.line("note", "ShardLab MPI rows skipped (%s)"
                 % ("--no-mpi" if a.no_mpi else "no mpirun on PATH"))

    sl_files, torch_files = [], []
    for rep in range(a.repetitions):
        for s, peer in STRATEGIES:
            filt = "--benchmark_filter=^train_step/%%s/%s/%s/ranks:%d/prefetch:1/" % (
                s, a.preset, a.ranks)
            out = os.path.join(a.work, "shardlab_local_%s_%d.json" % (s, rep))
            run([bench] + shape + ["--steps=%d" % a.steps, filt % "local",
                                   "--benchmark_out_format=json", "--benchmark_out=" + out],
                log, "shardlab_local_%s_%d" % (s, rep), env=sl_env)
            sl_files.append((rep, out))
            if mpi:
                out = os.path.join(a.work, "shardlab_mpi_%s_%d.json" % (s, rep))
                run(["mpirun"] + mpi_flags + ["-np", str(a.ranks), bench] + shape +
                    ["--mpi_steps=%d" % a.steps, filt % "mpi", "--benchmark_out_format=json",
                     "--benchmark_out=" + out], log, "shardlab_mpi_%s_%d" % (s, rep))
                sl_files.append((rep, out))
            for impl in a.impls:
                out = os.path.join(a.work, "torch_%s_%s_%d.json" % (impl, peer, rep))
                run([py, os.path.join(HERE, "torch_peer.py"), "--weights", weights, "--data",
                     tokens, "--strategy", peer, "--impl", impl, "--preset", a.preset,
                     "--ranks", str(a.ranks), "--batch", str(a.batch), "--seq", str(a.seq),
                     "--warmup", str(a.warmup), "--steps", str(a.steps), "--check", checks[s],
                     "--check-steps", str(a.check_steps), "--adamw", a.adamw, "--bind", a.bind,
                     "--out", out],
                    log, "torch_%s_%s_%d" % (impl, peer, rep))
                torch_files.append((rep, out))

    rows, ctx = collect(sl_files)
    write_json(os.path.join(data, "peers_shardlab.json"), rows, ctx)
    rows, ctx = collect(torch_files)
    write_json(os.path.join(data, "peers_torch.json"), rows, ctx)
    if not a.no_report:
        run(["/usr/bin/python3", os.path.join(ROOT, "bench", "report.py"), data, a.out])
    return 0


if __name__ == "__main__":
    sys.exit(main())
