"""The traced runs behind "Why these results" in docs/bench/README.md.

`make docs-figures` runs it (figure `bench-explained`); alone, with the page rewritten:

    python3 docs/figures.py bench-explained

The benchmark tables say how long a step takes; they do not say where the time went. This trains
the benchmark's shapes with `shardlab train` (tracing on), splits every step of every rank into
forward, backward, optimizer, communication and exposed communication from the run's spans, and
prints the tables the page quotes, plus a screenshot of the MPI pair with the optimizer steps
marked (docs/bench/explained_mpi_n2.png). Needs mpirun and xvfb-run."""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figlib import T, loadavg, picture, run as sh  # noqa: E402  (shared by all figure makers)
from viewer_pictures import timed_regions  # noqa: E402
SKIP = 2  # warm-up steps left out, as the benchmarks leave theirs out
MPIRUN = "mpirun --allow-run-as-root --oversubscribe -np 2"

# The benchmark's shapes (docs/bench/README.md): small at 2 x 64 tokens per rank, tiny at 4 x 64;
# --batch is the global batch.
MPI_RUNS = [(s, f"{MPIRUN} build/bin/shardlab train --backend mpi --model small --batch 4 --seq 64 "
                f"--steps 12 --strategy {s} --run-dir runs/bx-mpi-{s} --overwrite")
            for s in ("no_shard", "shard_optim", "shard_grad_op", "full_shard")]
PREFETCH_RUNS = [(p, "build/bin/shardlab train --model tiny --ranks 4 --batch 16 --seq 64 "
                     f"--steps 40 --strategy full_shard --prefetch {p} --run-dir runs/bx-pf{p} "
                     "--overwrite")
                 for p in (1, 0)]
SHOT = ("xvfb-run -a -s '-screen 0 1920x1200x24' build/bin/shardlab-viewer runs/bx-mpi-no_shard "
        "runs/bx-mpi-full_shard --at-step 6 --width 1800 --height 1000 --screenshot {png}")


def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(ivs):
    return sum(b - a for a, b in ivs)


def minus(a_ivs, b_ivs):
    """Length of the union a minus the union b (both already unions)."""
    got = 0
    for a0, a1 in a_ivs:
        covered = sum(max(0, min(a1, b1) - max(a0, b0)) for b0, b1 in b_ivs)
        got += (a1 - a0) - covered
    return got


def breakdown(run_dir):
    """Per step (after the warm-up), mean over ranks: ms of step, forward, backward, optimizer,
    comm (union of comm spans), exposed (comm with no compute), and the optimizer's share."""
    meta = json.load(open(os.path.join(run_dir, "meta.json")))
    rows = []
    for r in range(meta["world_size"]):
        evs = [json.loads(l) for l in open(os.path.join(run_dir, f"rank{r}.jsonl")) if l.strip()]
        steps = [e for e in evs if e["kind"] == "step"]
        spans = [e for e in evs if e["kind"] == "span"]
        t_prev = None
        for st in steps:
            if t_prev is not None and st["step"] > SKIP:
                inside = [s for s in spans if t_prev <= s["t_start"] < st["t"]]
                comp = union([(s["t_start"], s["t_end"]) for s in inside if s["lane"] == "compute"])
                comm = union([(s["t_start"], s["t_end"]) for s in inside if s["lane"] == "comm"])

                def op(name):
                    return sum(s["t_end"] - s["t_start"] for s in inside
                               if s["lane"] == "compute" and s["op"] == name)
                rows.append({"step": st["step_time"] * 1e3, "forward": op("forward") / 1e6,
                             "backward": (op("backward") + op("recompute")) / 1e6,
                             "optimizer": op("optimizer") / 1e6, "comm": length(comm) / 1e6,
                             "exposed": minus(comm, comp) / 1e6})
            t_prev = st["t"]
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}, meta


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def make(cwd):
    mpi = {}
    for s, cmd in MPI_RUNS:
        sh(cmd, cwd)
        mpi[s] = breakdown(os.path.join(cwd, "runs", f"bx-mpi-{s}"))[0]
    pf = {}
    for p, cmd in PREFETCH_RUNS:
        sh(cmd, cwd)
        pf[p] = breakdown(os.path.join(cwd, "runs", f"bx-pf{p}"))[0]

    # The screenshot: the two MPI runs side by side, the optimizer step of rank 0 marked in each.
    marks = []
    for i, s in enumerate(("no_shard", "full_shard")):
        d = os.path.join(cwd, "runs", f"bx-mpi-{s}")
        evs = [json.loads(l) for l in open(os.path.join(d, "rank0.jsonl")) if l.strip()]
        ends = {e["step"]: e["t"] for e in evs if e["kind"] == "step"}
        opt = [e for e in evs if e["kind"] == "span" and e["op"] == "optimizer"
               and ends[5] <= e["t_start"] < ends[6]]
        marks.append(f"{i + 1}:compute:0:{(opt[0]['t_start'] + opt[-1]['t_end']) // 2}:{i}")
    png = os.path.join(cwd, "explained_mpi_n2.png")
    sh(SHOT.format(png=png) + "".join(f" --mark {m}" for m in marks), cwd)
    report = json.load(open(png[:-4] + ".json"))
    if not all(m["shown"] for m in report["marks"]):
        sys.exit(f"docs/bench_explained.py: a mark fell outside its panel: {report['marks']}")
    regions, note = timed_regions(report)
    os.replace(png, picture("docs/bench/explained_mpi_n2.png", regions, note))

    def f(v):
        return T(f"{v:.1f}")

    def ratio(a, b):
        return T(f"{a['step'] / b['step']:.2f}")
    lines = ["```"] + [c for _, c in MPI_RUNS] + [c for _, c in PREFETCH_RUNS] + [
        SHOT.format(png="docs/bench/explained_mpi_n2.png") + " --mark ...", "```", "",
        f"MPI, `small`, N = 2 (one process per core), median over steps {SKIP + 1} to 12 and both "
        "ranks, ms per step:", ""]
    lines += table(["strategy", "step", "forward", "backward", "optimizer", "comm", "exposed comm"],
                   [[s, f(m["step"]), f(m["forward"]), f(m["backward"]), f(m["optimizer"]),
                     f(m["comm"]), f(m["exposed"])] for s, m in mpi.items()])
    d, z = mpi["no_shard"], mpi["full_shard"]
    saved = d["optimizer"] - z["optimizer"]
    extra = z["exposed"] - d["exposed"]
    verdict = ("full_shard's step was the shorter" if d["step"] > z["step"]
               else "DDP's step was the shorter")
    lines += ["", f"In this run DDP's AdamW took {f(d['optimizer'])} ms of its {f(d['step'])} ms "
              f"step and full_shard's {f(z['optimizer'])} ms of {f(z['step'])} ms: sharding saved "
              f"{f(saved)} ms of optimizer per step, while full_shard's exposed communication was "
              f"{f(extra)} ms longer than DDP's; step time no_shard / full_shard "
              f"{ratio(d, z)}: {T(verdict)}.", "",
              "Local, `tiny`, N = 4 (four rank threads and their communication threads on two "
              f"cores), full_shard, median over steps {SKIP + 1} to 40 and all ranks, ms per step:",
              ""]
    lines += table(["prefetch", "step", "forward + backward", "optimizer", "comm", "exposed comm",
                    "comm hidden"],
                   [[str(p), f(m["step"]), f(m["forward"] + m["backward"]), f(m["optimizer"]),
                     f(m["comm"]), f(m["exposed"]), f(m["comm"] - m["exposed"])]
                    for p, m in pf.items()])
    on, off = pf[1], pf[0]
    lines += ["", f"With prefetch, {f(on['comm'] - on['exposed'])} ms of communication per step "
              f"ran under compute; against prefetch off, communication took "
              f"{f(on['comm'] - off['comm'])} ms more and forward + backward "
              f"{f(on['forward'] + on['backward'] - off['forward'] - off['backward'])} ms more. "
              f"Step time prefetch on / off: {ratio(on, off)}."]
    lines += ["", "![MPI, N = 2, step 6: no_shard (left) and full_shard (right), the optimizer "
              "step of rank 0 marked 1 and 2](explained_mpi_n2.png)", "",
              f"*Made by `make docs-figures` (docs/bench_explained.py), load average {loadavg()} "
              "on 2 cores when it finished.*"]
    return "\n".join(lines)
