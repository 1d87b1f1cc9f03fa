"""Regenerates every figure the pages show (make docs-figures): quoted program outputs, tables,
generated files and pictures.

Each row of FIGURES names a figure, the pages (or files) it goes to and the function that makes it
by running real commands. A block figure replaces the lines between '<!-- figure:NAME:begin -->'
and '<!-- figure:NAME:end -->' on each of its pages (tests/corpus/splice_table.py, the splicer of
make reliability-table, writes them); a file figure writes whole files (docs/lessons/table.md, the
benchmark report, ...). Pictures are written where figlib.picture() says. The commands run in a
scratch directory (BUILD/docs-figures/, with BUILD linked there as build/ and data/ as data/, so a
printed `build/bin/...` reads as on the page) with one BLAS thread each.

    python3 docs/figures.py [--build build] [--slow] [--list] [NAME ...]

Without --slow only the figures that take seconds run; --slow adds those that take minutes (the
trained-loss table of docs/data.md). Names pick figures. docs/docs_check.py (make docs-check) runs
the same makers into a scratch tree and compares (docs/README.md, "Keeping figures true")."""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figlib import (NUM, ROOT, T, TIMED, excerpt, fenced, loadavg, mark_timing,  # noqa: E402
                    output_root, picture, run, strip_marks)

SPLICE = os.path.join(ROOT, "tests", "corpus", "splice_table.py")


# ---- figures: program outputs ------------------------------------------------------------------

# A lesson's step lines: ms/step and tokens/s are the third and fourth columns.
LESSON_RULES = TIMED + [r"^ +\d+ \| +" + NUM + r" \| +(" + NUM + r") \| +(" + NUM + r") \|"]


def lesson_output(n, name):
    """A lesson's whole output with its defaults, as `make lesson N=n` prints it."""
    def make(cwd):
        out = run(f"build/bin/lesson_0{n}_{name}", cwd).rstrip("\n").split("\n")
        return mark_timing(fenced(out), LESSON_RULES)
    return make


def lesson5_sixty_steps(cwd):
    """Lesson 5 over 60 steps: the check line with the largest loss difference from lesson 1."""
    out = run("build/bin/lesson_05_hybrid --steps 60", cwd)
    line = [l for l in out.split("\n") if "loss curve matches lesson 1" in l]
    if len(line) != 1:
        sys.exit("docs/figures.py: lesson 5 printed no 'loss curve matches lesson 1' line")
    return fenced(['make lesson N=5 ARGS="--steps 60"', "...", line[0]])


def lesson5_twenty_steps(cwd):
    """Lesson 5's default 20 steps: the loss check line, quoted where the page says what it shows."""
    out = run("build/bin/lesson_05_hybrid", cwd)
    line = [l for l in out.split("\n") if "loss curve matches lesson 1" in l]
    if len(line) != 1:
        sys.exit("docs/figures.py: lesson 5 printed no 'loss curve matches lesson 1' line")
    return fenced(["make lesson N=5", "...", line[0]])


def plan_tiny(cwd):
    """The planner on the lessons' model and batch: the model line and the strategy table."""
    cmd = "build/bin/shardlab plan --model tiny --ranks 4 --batch 2 --seq 64"
    out = run(cmd, cwd).split("\n\n")[0]
    return fenced([cmd] + out.split("\n"))


# The step lines of `shardlab train`: tokens/s is the fourth column.
TRAIN_RULES = TIMED + [r"^ +\d+ \| +" + NUM + r" \| +" + NUM + r" \| +(\d+) \|"]


def lesson6_train(cwd):
    """Lesson 6: lesson 4's equivalent in the engine, the parallel line, the first step lines and
    the end of the run (every left-out line shown as ...)."""
    cmd = ("build/bin/shardlab train --model tiny --ranks 4 --steps 20 --batch 8 --seq 64 --lr 3e-3 "
           "--warmup 0 --schedule constant --strategy full_shard")
    out = run(cmd, cwd)
    step = re.compile(r"^ +(\d+) \|")

    def keep(line):
        m = step.match(line)
        if m:
            return int(m.group(1)) <= 3 or int(m.group(1)) == 20
        return (line.startswith(("parallel:", "  step |", "-------+", "final loss", "peak memory"))
                or re.match(r"\d+ steps, \d+ tokens in", line) is not None)
    lines = excerpt(out, keep, cmd)
    return "<!-- docs-test: run -->\n" + mark_timing(fenced(lines), TRAIN_RULES)


def plan_output(cmd):
    """A `shardlab plan` command and its whole output."""
    def make(cwd):
        out = run(cmd, cwd).rstrip("\n")
        return fenced([cmd.replace("build/bin/", "")] + out.split("\n"))
    return make


PLAN_ZERO = ("build/bin/shardlab plan --params 7.5e9 --ranks 64 --param-dtype f16 "
             "--reduce-dtype f16 --decimal --strategy no_shard --strategy shard_optim "
             "--strategy shard_grad_op --strategy full_shard")
PLAN_ARTICLE = ("build/bin/shardlab plan --params 7e9 --ranks 4 --param-dtype bf16 "
                "--reduce-dtype bf16 --decimal --strategy no_shard --strategy full_shard")


def plan_7b_a100(cwd):
    """Llama 2 7B full_shard on 4 of the a100-40gb preset's GPUs, T = 2048, bf16, flash attention:
    B 1..4 per rank, with and without act-ckpt, offload none / optim / params. One `shardlab plan`
    per row."""
    rows = ["| B per rank | act-ckpt | offload | device peak GiB | headroom GiB | host peak GiB | "
            "fits 40 GiB | step s | tokens/s (4 ranks) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = ("build/bin/shardlab plan --model llama2-7b --ranks 4 --seq 2048 --param-dtype bf16 "
            "--reduce-dtype bf16 --attention flash --strategy full_shard --mem-limit 40GiB "
            "--cluster a100-40gb")
    for ckpt in ["", " --act-ckpt"]:
        for off in ["none", "optim", "params"]:
            for b in [1, 2, 4]:
                cmd = f"{base} --batch {b}{ckpt} --offload {off}"
                out = run(f"{cmd} || [ $? -eq 2 ]", cwd)  # 2: it does not fit
                # the plan's row (the transient table's comes after it)
                line = [l for l in out.split("\n") if l.startswith("full_shard")][:1]
                if len(line) != 1:
                    sys.exit(f"docs/figures.py: `{cmd}` printed no full_shard row:\n{out}")
                f = line[0].split()
                # strategy N G params grads optim persist transient peak padding headroom [host]
                # fits step tokens/s exposed
                peak, headroom = float(f[8]) / 1024, float(f[10]) / 1024
                host = float(f[11]) / 1024 if off != "none" else 0.0
                fits = f[12] if off != "none" else f[11]
                step_ms, tps = float(f[-3]), float(f[-2])
                rows.append(f"| {b} | {'yes' if ckpt else 'no'} | {off} | {peak:.1f} | "
                            f"{headroom:.2f} | {host:.1f} | {fits} | {step_ms / 1e3:.2f} | "
                            f"{tps:,.0f} |")
    cmd = base.replace("build/bin/", "") + " --batch B [--act-ckpt] --offload none|optim|params"
    return "\n".join([f"`{cmd}`, one row each:", ""] + rows)


def plan_speed(cwd):
    """The wall time of planning all five strategies of gpt2 (B 8, T 1024), best of three, with
    the machine's load."""
    cmd = ("build/bin/shardlab plan --model gpt2 --ranks 8 --batch 8 --seq 1024 --param-dtype bf16 "
           "--reduce-dtype bf16")
    times = []
    for _ in range(3):
        t0 = time.time()
        run(cmd, cwd)
        times.append(time.time() - t0)
    return fenced([f"$ time {cmd.replace('build/bin/', '')}",
                   f"best of 3: {T(f'{min(times):.2f} s')} wall (load average {loadavg()})"])


def plan_offload_tiny(cwd):
    """memory.md: the planner's device and host peaks of tiny's full_shard on 3 ranks with params
    offload (the case FsdpOffload.PlannedDeviceAndHostPeaksAreTheMeasured also measures)."""
    cmd = ("build/bin/shardlab plan --model tiny --n-layer 4 --ranks 3 --batch 2 --seq 32 "
           "--strategy full_shard --offload params")
    out = run(cmd, cwd).split("\n\n")[0]
    return fenced([cmd.replace("build/bin/", "")] + out.split("\n"))


def plan_cell(out, column, cmd):
    """The cell of `column` in full_shard's row of a `shardlab plan` table: the row follows its
    header line, with the units line between them in the strategy table."""
    lines = out.split("\n")
    for i, line in enumerate(lines):
        names = line.split()
        if column not in names:
            continue
        for row in lines[i + 1:i + 3]:
            if row.startswith("full_shard"):
                return row.split()[names.index(column)]
    sys.exit(f"docs/figures.py: `{cmd}` printed no full_shard '{column}' cell")


def attention_plan(cwd):
    """model.md: what flash attention saves, from `shardlab plan` of gpt2 full_shard on 8 ranks
    (B 4) at three sequence lengths, each with --attention naive and flash: the activations at
    the peak and the whole peak."""
    rows = ["| T | --attention | activations at the peak MiB | peak MiB |",
            "| --- | --- | --- | --- |"]
    base = "build/bin/shardlab plan --model gpt2 --ranks 8 --batch 4 --strategy full_shard"
    for t in (256, 512, 1024):
        for kernel in ("naive", "flash"):
            cmd = f"{base} --seq {t} --attention {kernel}"
            out = run(cmd, cwd)
            rows.append(f"| {t} | {kernel} | {plan_cell(out, 'activation', cmd)} | "
                        f"{plan_cell(out, 'peak', cmd)} |")
    made = base.replace("build/bin/", "") + " --seq T --attention naive|flash"
    return "\n".join(rows) + f"\n\nEach row: `{made}`."


def llama_presets(cwd):
    """model.md: the Llama-family presets as `shardlab plan` builds them (shape and parameter
    count from the model line) and full_shard's planned peak on 8 ranks, B 1 per rank, bf16,
    flash attention, activation checkpointing, T 2048 (the small presets: their longest)."""
    rows = ["| --model | shape | parameters | T | full_shard peak per rank, 8 ranks |",
            "| --- | --- | --- | --- | --- |"]
    base = ("build/bin/shardlab plan --ranks 8 --batch 1 --strategy full_shard "
            "--param-dtype bf16 --reduce-dtype bf16 --attention flash --act-ckpt")
    for preset, seq in (("llama-tiny", 64), ("llama-small", 256), ("llama2-7b", 2048),
                        ("llama3-8b", 2048), ("mistral-7b", 2048), ("qwen2-7b", 2048),
                        ("llama3-70b", 2048)):
        cmd = f"{base} --model {preset} --seq {seq}"
        out = run(cmd, cwd)
        m = re.match(r"model \S+: llama (.*) \(([\d,]+) params\);", out)
        if not m:
            sys.exit(f"docs/figures.py: `{cmd}` printed no Llama model line")
        mib = float(plan_cell(out, "peak", cmd))
        peak = f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.2f} MiB"
        rows.append(f"| `{preset}` | {m.group(1)} | {m.group(2)} | {seq} | {peak} |")
    made = base.replace("build/bin/", "") + " --model NAME --seq T"
    return "\n".join(rows) + f"\n\nEach row: `{made}`."


def import_fsdp2(cwd):
    """docs/import.md: the committed FSDP2 traces (tests/data/torch_traces/fsdp2, made by
    bench/torch_traces.py) imported, the summary of the run directory and a viewer picture of
    it. The traces are fixed files, so nothing here depends on this machine's timing."""
    traces = os.path.join(ROOT, "tests", "data", "torch_traces", "fsdp2")
    shutil.rmtree(os.path.join(cwd, "runs", "fsdp2"), ignore_errors=True)
    out = run(f"build/bin/shardlab import {traces} --out runs/fsdp2", cwd).rstrip("\n")
    summary = run("build/bin/shardlab summary runs/fsdp2", cwd).rstrip("\n").split("\n")
    png = os.path.join(cwd, "import_fsdp2.png")
    run(f"xvfb-run -a -s '-screen 0 1720x1100x24' build/bin/shardlab-viewer runs/fsdp2 "
        f"--width 1600 --height 1000 --screenshot {png} --frames 4", cwd)
    os.replace(png, picture("docs/img/import_fsdp2.png"))
    return fenced(["$ shardlab import tests/data/torch_traces/fsdp2 --out runs/fsdp2", out,
                   "$ shardlab summary runs/fsdp2"] + summary)


def import_gpu(cwd):
    """docs/import.md: GPU traces of real NCCL jobs (tests/data/torch_traces/nccl_ddp and
    nccl_subset, Holistic Trace Analysis' test data) imported, and their summaries: fixed files,
    so nothing here depends on this machine's timing."""
    lines = []
    for name in ("nccl_ddp", "nccl_subset"):
        traces = os.path.join(ROOT, "tests", "data", "torch_traces", name)
        shutil.rmtree(os.path.join(cwd, "runs", name), ignore_errors=True)
        out = run(f"build/bin/shardlab import {traces} --out runs/{name}", cwd).rstrip("\n")
        summary = run(f"build/bin/shardlab summary runs/{name}", cwd).rstrip("\n").split("\n")
        lines += [f"$ shardlab import tests/data/torch_traces/{name} --out runs/{name}", out,
                  f"$ shardlab summary runs/{name}"] + summary + [""]
    return fenced(lines[:-1])


HSDP_7B = ("build/bin/shardlab simulate --model llama2-7b --cluster h100-sxm --ranks 16 "
           "--strategy hybrid_shard --hybrid-group 8 --param-dtype bf16 --reduce-dtype bf16 "
           "--attention flash --act-ckpt --batch 16 --seq 2048 --steps 3 --run-dir sim-hsdp "
           "--overwrite")


def hsdp_overlap(cwd):
    """fsdp.md: hybrid_shard's cross-group all-reduce overlapped, simulated: llama2-7b on 2
    nodes of 8 H100s, the step and the exposed communication from `shardlab summary`."""
    run(HSDP_7B, cwd)
    out = run("build/bin/shardlab summary sim-hsdp", cwd)
    cmd = HSDP_7B.replace("build/bin/", "").replace(" --run-dir", " \\\n    --run-dir")
    return fenced(excerpt(out, lambda l: l.startswith(("steps ", "exposed comm")),
                          "$ " + cmd + "\n$ shardlab summary sim-hsdp"))


def offload_small(cwd):
    """fsdp.md: full_shard at small on 4 ranks under a 36 MiB limit, without offload (out of
    memory) and with --offload params (trains), with the planner's peaks beside."""
    plan = ("build/bin/shardlab plan --model small --ranks 4 --batch 4 --seq 64 "
            "--strategy full_shard --offload params")
    oom = "build/bin/shardlab train --ranks 4 --strategy full_shard --mem-limit 36MiB --steps 3"
    fits = oom + " --offload params"
    p = run(plan, cwd).split("\n\n")[0]
    bad = run(oom + " --trace off || [ $? -eq 1 ]", cwd)
    good = run(fits + " --trace off", cwd)
    err = [l for l in bad.split("\n") if "out of memory" in l][:1]
    if not err:
        sys.exit(f"docs/figures.py: `{oom}` did not run out of memory:\n{bad}")
    keep = [l for l in good.split("\n")
            if l.startswith(("peak memory", "device peak", "host peak", "copied per step"))]
    lines = ["$ " + plan.replace("build/bin/", "")] + p.split("\n") + [
        "$ " + oom.replace("build/bin/", ""), "...", err[0][:300],
        "$ " + fits.replace("build/bin/", ""), "..."] + keep
    # Every rank allocates the same; which one crosses the limit first is the scheduler's choice.
    return "<!-- docs-test: skip -->\n" + mark_timing(fenced(lines), TIMED + [
        r"^shardlab: error: rank (\d+): out of memory"])


def demo_table(cwd):
    """`shardlab demo`'s closing table (README.md and docs/fsdp.md quote it)."""
    out = run("build/bin/shardlab demo", cwd)
    start = out.find("==== side by side")
    if start < 0:
        sys.exit("docs/figures.py: shardlab demo printed no '==== side by side' table")
    table = out[start:].split("\n\n")[0].split("\n")
    return mark_timing(fenced([l for l in table if not l.startswith("run directories")]),
                       TIMED + [r"^tokens/s \(all ranks\) +(\d+) +(\d+)$"])


# docs/data.md: how close each run gets to the entropy rate H, with the user CPU time of the same
# run (every thread; the demo's is halved: it trains twice).
DATA_RUNS = [
    ("`shardlab train` (1 rank, 300 steps, batch 16 x 64, lr 2e-3, warmup 30, cosine)",
     "build/bin/shardlab train"),
    ("`shardlab train --steps 400`", "build/bin/shardlab train --steps 400"),
    ("`shardlab demo --steps 300` (each of its two runs: 4 ranks, batch 8 x 64, lr 3e-3, "
     "warmup 5)", "build/bin/shardlab demo --steps 300"),
]


def data_table(cwd):
    rows = ["| command | tokens | CPU time | final loss | above H |",
            "| --- | --- | --- | --- | --- |"]
    for label, cmd in DATA_RUNS:
        out, cpu = run(cmd, cwd, timed=True)
        finals = re.findall(r"final loss (\d+\.\d+) \(mean of the last \d+ steps\); "
                            r"entropy rate [\d.]+: ([\d.]+)% above the floor", out)
        tokens = re.findall(r"\d+ steps, (\d+) tokens in", out)
        if not finals or not tokens:
            sys.exit(f"docs/figures.py: `{cmd}` printed no final loss or token count")
        runs = len(finals)  # the demo trains twice, with the same loss (bit-identical strategies)
        if len(set(finals)) != 1:
            sys.exit(f"docs/figures.py: `{cmd}`: its runs disagree: {finals}")
        loss, above = finals[0]
        rows.append(f"| {label} | {round(int(tokens[0]) / 1000)}k | {T(f'{cpu / runs:.0f} s')} | "
                    f"{loss} | {float(above):.1f}% |")
    return "\n".join(rows)


# What `shardlab summary` prints that depends on timing, beyond TIMED: the tables of times per
# rank and of waits, the straggler lines' figures, and the exposed share.
SUMMARY_RULES = TIMED + [
    r"^exposed comm (" + NUM + r")% of comm time: (" + NUM + ") of (" + NUM + ")",
    r"^\d+ +(" + NUM + r") +(" + NUM + r") +(" + NUM + r") +(" + NUM + r")$",  # time per rank
    r"^\d+ +(" + NUM + r") +" + NUM + r" +(\d+)$",  # waits per rank: ms/step, least (steps)
    r"^run totals, all ranks and steps: compute .*$",
    r"^lead of rank (\d+), .* median (" + NUM + r") ms .* spread (" + NUM + ") ms",
    r"within the threshold of (" + NUM + r") ms: .*, (" + NUM + ") ms\)$",
    r"^steps \d+ \(\d+ measured, first excluded as warm-up\) +(step time ms: .*)$",
    r"^(?:step time ms, median|tokens/s \(all ranks\)|  comm ms|  exposed comm ms)((?: +" + NUM
    + ")+)$",
    r"; median step time (" + NUM + "x)",
    # exposed comm by collective and unit: times, and the order they sort the rows in
    r"^([a-z_]\S* +.+? +" + NUM + r" +" + NUM + r" +" + NUM + r" +" + NUM + r")$",
]


# A run with no straggler on purpose: which rank waited least, and whether its lead clears the
# run's noise, are themselves timing (on a busy 2-core machine the scheduler decides).
VERDICT_RULES = [r"^(straggler: .*)$",
                 r"^rank (\d+)'s lead by step \(.*minus rank (\d+)'s, in that step\):(.*)$"]


def summary_tiny(cwd):
    """docs/observability.md: a short traced run and `shardlab summary` of it (the block is also
    run by the docs.commands test, hence its docs-test comment)."""
    train = "shardlab train --model tiny --ranks 2 --steps 6 --batch 4 --seq 32 --run-dir runs/t"
    run("build/bin/" + train + " --overwrite", cwd)
    out = run("build/bin/shardlab summary runs/t", cwd).rstrip("\n").split("\n")
    block = fenced([f"$ {train}", "$ shardlab summary runs/t"] + out)
    return "<!-- docs-test: run -->\n" + mark_timing(block, SUMMARY_RULES + VERDICT_RULES)


# collectives.md: DDP and full_shard on the same model, and `shardlab summary` of both.
COMPARE_TRAIN = ("shardlab train --model small --ranks 4 --steps 6 --batch 8 --seq 64 "
                 "--strategy {s} --run-dir runs/{d}")


def summary_compare(cwd):
    """The two runs and `shardlab summary runs/dp runs/fsdp`: per step and rank, and the ratios."""
    lines = []
    for s, d in (("no_shard", "dp"), ("full_shard", "fsdp")):
        cmd = COMPARE_TRAIN.format(s=s, d=d)
        run("build/bin/" + cmd + " --overwrite", cwd)
        lines.append("$ " + cmd)
    out = run("build/bin/shardlab summary runs/dp runs/fsdp", cwd).rstrip("\n").split("\n")
    block = fenced(lines + ["$ shardlab summary runs/dp runs/fsdp"] + out)
    return "<!-- docs-test: run -->\n" + mark_timing(block, SUMMARY_RULES)


def reliability_slow(cwd):
    """docs/reliability.md: a straggler on demand, and the end of the run that names it."""
    cmd = ("build/bin/shardlab train --model small --ranks 2 --steps 6 --slow-rank 1:3 "
           "--run-dir runs/slow --overwrite")
    out = run(cmd, cwd)
    start = out.find("waiting for other ranks")
    if start < 0:
        sys.exit(f"docs/figures.py: `{cmd}` printed no 'waiting for other ranks' table")
    tail = out[start:].split("\n\n")[0].split("\n")
    block = fenced([cmd.replace("build/bin/", ""), "..."] + tail)
    return "<!-- docs-test: run -->\n" + mark_timing(block, SUMMARY_RULES + [
        r"^lead of rank 1, .*$", r"^rank 1's lead by step \(step:\+X ms\):(.*)$",
        r"^straggler: rank 1; the others waited (" + NUM + r") ms .* threshold of (" + NUM +
        r") ms .* step, (" + NUM + r") ms\)$"])


# docs/reliability.md: rank 2 of an MPI job kills itself; mpirun tears the job down. The root and
# 2-core flags are this machine's (the job runs as root, three ranks on two cores).
MPI_KILL = ("mpirun --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 5 -np 3 "
            "build/bin/shardlab train --backend mpi --model tiny --steps 6 --batch 12 "
            "--kill-rank 2:3 --run-dir runs/killed")


def mpi_kill(cwd):
    """What the survivors say on stderr, the job's exit status, and `shardlab summary`'s account
    of how the run ended (from flight.json). The survivors' lines are sorted: they write at once."""
    run("rm -rf runs/killed", cwd)
    out = run(MPI_KILL + ' 2>&1; echo "exit status $?"', cwd)
    said = sorted(l for l in out.split("\n") if re.match(r"shardlab: rank \d+: terminated", l))
    status = [l for l in out.split("\n") if l.startswith("exit status")]
    if len(said) < 1 or not status or status[0] == "exit status 0":
        sys.exit(f"docs/figures.py: `{MPI_KILL}` did not end as a killed job should:\n{out[-2000:]}")
    summary = run("build/bin/shardlab summary runs/killed", cwd).split("\n")
    ended = [l for l in summary[:12] if l.startswith(("how the run ended", "  rank "))]
    cmd = MPI_KILL.replace("build/bin/", "").replace("-np 3 ", "-np 3 \\\n    ")
    return fenced(cmd.split("\n") + ["..."] + said + status +
                  ["", "shardlab summary runs/killed", "..."] + ended + ["..."])


def load_module(name):
    """docs/NAME.py, a figure maker with its own command line."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "docs", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def viewer_tour(cwd):
    """docs/viewer-tour.md: three short runs, two annotated screenshots (docs/img/tour_*.png) and
    the callouts' text (docs/viewer_tour.py)."""
    return load_module("viewer_tour").make(cwd)


def viewer_pictures(name):
    """docs/viewer.md and the lessons' viewer pictures (docs/viewer_pictures.py)."""
    return lambda cwd: getattr(load_module("viewer_pictures"), name)(cwd)


def bench_explained(cwd):
    """docs/bench/README.md's "Why these results": traced runs of the benchmark's shapes split
    into compute, optimizer and communication, and a screenshot (docs/bench_explained.py)."""
    return load_module("bench_explained").make(cwd)


# docs/simulate.md: a 7B-class step predicted on 64 H100s, and gpt2-xl's strategies on two
# clusters. Simulated times are virtual: the same on any machine, whatever its load.
SIM_7B = ("build/bin/shardlab simulate --cluster h100-sxm --model 7b --ranks 64 --batch 64 "
          "--seq 2048 --param-dtype bf16 --reduce-dtype bf16 --act-ckpt "
          "--run-dir sim-7b --overwrite")


def simulate_7b(cwd):
    """The parallel line and the predictions of SIM_7B."""
    out = run(SIM_7B, cwd)
    start = out.find("\npredicted for")
    par = [l for l in out.split("\n") if l.startswith("parallel:")]
    if start < 0 or not par:
        sys.exit("docs/figures.py: shardlab simulate printed no 'predicted for' section")
    cmd = SIM_7B.replace("build/bin/", "").replace("--ranks 64 ", "--ranks 64 \\\n    ")
    body = out[start + 1:].rstrip().split("\n")
    body = [l for l in body if not l.startswith("run directory") and "(tables:" not in l]
    return fenced(cmd.split("\n") + ["...", par[0], "..."] + body)


def gpu_h100(cwd):
    """docs/gpu.md: what bench/gpu/gpu_speed.sh measured on a lent H100 (its JSON, kept in
    docs/bench/data/) beside `shardlab simulate` of each configuration, run here."""
    cmd = (f"python3 {ROOT}/bench/gpu/gpu_report.py {ROOT}/docs/bench/data/gpu_h100.json "
           "--shardlab build/bin/shardlab")
    return run(cmd, cwd).strip()


def simulate_table(cwd):
    """gpt2-xl on 64 ranks, bf16: no_shard, full_shard and hybrid_shard (G 8) on both presets."""
    rows = ["| cluster | strategy | step time | tokens/s | MFU | exposed comm | peak/rank |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    base = ("build/bin/shardlab simulate --model gpt2-xl --ranks 64 --batch 64 --seq 1024 "
            "--param-dtype bf16 --reduce-dtype bf16 --run-dir sim-table --overwrite")
    for cluster in ["h100-sxm", "a100-40gb"]:
        for strategy in ["no_shard", "full_shard", "hybrid_shard --hybrid-group 8"]:
            out = run(f"{base} --cluster {cluster} --strategy {strategy}", cwd)
            get = lambda pat: re.search(pat, out).group(1)
            rows.append(f"| {cluster} | {strategy} | {get(r'step time +([0-9.]+ ms)')} | "
                        f"{int(get(r'tokens/s +([0-9]+)')):,} | {get(r'MFU +([0-9.]+%)')} | "
                        f"{get(r'exposed comm +([0-9.]+ ms)')} | "
                        f"{get(r'peak memory +([0-9.]+ [KMG]iB)')} |")
    return "\n".join(rows)


def choosing(name):
    """docs/choosing.md: tokens/s against inter-node bandwidth, memory against N, and the worked
    7B example of `shardlab plan --recommend` (docs/choosing.py)."""
    return lambda cwd: getattr(load_module("choosing"), name)(cwd)


# ---- figures: whole files and tables of other make targets -------------------------------------

def corpus_table(cwd):
    """docs/reliability.md's table of the bad-input corpus (make reliability-table's)."""
    table = os.path.join(cwd, "corpus-table.md")
    run(f"bash {ROOT}/tests/corpus/run_corpus.sh build/bin {table} > corpus.log", cwd)
    # A few cases quote what depends on the machine or on timing: the viewer's frame times and
    # this machine's memory and thread counts.
    text = open(table, encoding="utf-8").read().rstrip("\n")
    return mark_timing(text, TIMED + [r"this machine's (" + NUM + r" [KMGT]iB)",
                                      r"the (\d+) hardware threads",
                                      # which rank ran out of threads, and so where the cell's
                                      # message is cut
                                      r"rank (\d+: could not start a thread[^`]*)",
                                      r"(\d+) vertices", r"step time ms: (.*?)`",
                                      r"rank (\d+): step \d+: loss is NaN",
                                      # a diverging run's loss (lr 1000): its last digits
                                      # differ from run to run
                                      r"loss (" + NUM + r") is above 2 x the best loss",
                                      # a run's own clock, quoted by the impossible-event cases
                                      r"not (\d+), (\d+), (\d+)\)",
                                      r"\(t (\d+) before the previous memory event's t (\d+):",
                                      # an edited index's checksums: of a checkpoint the
                                      # corpus trains anew each run (they differ run to run)
                                      r"index_crc32c is ([0-9a-f]{8}) but its content gives "
                                      r"([0-9a-f]{8})"])


def write_file(rel, text):
    """A whole generated file, in the output root."""
    path = picture(rel)  # recorded with the pictures: docs-check compares it as a file
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def lessons_files(cwd):
    """docs/lessons/table.md (make lessons-table), docs/lessons/diffs/NN.diff (make lesson-diffs)
    and docs/lessons/img/ (make lesson-figures)."""
    out = os.path.join(cwd, "lessons-table")
    os.makedirs(out, exist_ok=True)
    names = ["01_data_parallel", "02_sharded_params", "03_sharded_grads", "04_sharded_optimizer",
             "05_hybrid"]
    jsons = []
    for l in names:
        extra = " --group 2" if l.startswith("05") else ""
        run(f"build/bin/lesson_{l} --model small --steps 10 --ranks 4{extra} "
            f"--json {out}/{l}.json > {out}/{l}.txt", cwd)
        jsons.append(f"{out}/{l}.json")
    table = run(f"python3 {ROOT}/lessons/tools/lessons_table.py 'make lessons-table' "
                + " ".join(jsons), cwd)
    write_file("docs/lessons/table.md", table)
    for prev, l in zip(names, names[1:]):
        p = subprocess.run(["diff", "-u", "--label", f"lessons/{prev}/main.cpp", "--label",
                            f"lessons/{l}/main.cpp", os.path.join(ROOT, "lessons", prev, "main.cpp"),
                            os.path.join(ROOT, "lessons", l, "main.cpp")],
                           stdout=subprocess.PIPE, text=True)
        write_file(f"docs/lessons/diffs/{l[:2]}.diff", p.stdout)
    img = os.path.dirname(picture("docs/lessons/img/01_data_parallel.png"))
    for n in ["02_schedule", "02_sharded_params", "03_sharded_grads", "04_sharded_optimizer",
              "05_hybrid"]:
        picture(f"docs/lessons/img/{n}.png")
    run(f"/usr/bin/python3 {ROOT}/lessons/tools/draw_figures.py {img} > /dev/null", cwd)
    return None


def bench_report(cwd):
    """docs/bench/report.md and its plots, rendered again from the measurements make bench and
    make bench-peers left in docs/bench/data/ (bench/report.py), and fsdp.md's wrap-policy plot
    (bench/wrap_report.py): the same data must give the same report and pictures."""
    # report.py prints its own command line: run it as make bench does, from a root of its own
    # that holds a copy of the data, so the page gets `bench/report.py docs/bench/data docs/bench`.
    top = os.path.join(cwd, "bench-report")
    shutil.rmtree(top, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "docs", "bench", "data"),
                    os.path.join(top, "docs", "bench", "data"))
    os.symlink(os.path.join(ROOT, "bench"), os.path.join(top, "bench"))
    run("/usr/bin/python3 bench/report.py docs/bench/data docs/bench > /dev/null", top)
    out = os.path.join(top, "docs", "bench")
    for f in sorted(os.listdir(out)):
        if f.endswith(".png"):
            shutil.copyfile(os.path.join(out, f), picture(f"docs/bench/{f}"))
        elif f == "report.md":
            write_file("docs/bench/report.md", open(os.path.join(out, f), encoding="utf-8").read())
    return None


def wrap_sweep(cwd):
    """docs/fsdp.md's wrap-policy table and plot, from the sweep make bench measured
    (docs/bench/data/wrap.json, through bench/wrap_report.py), with when and under which load it
    was measured and what its medians say (from the same data)."""
    data = os.path.join(ROOT, "docs", "bench", "data")
    png = picture("docs/img/wrap_sweep.png")
    run(f"/usr/bin/python3 {ROOT}/bench/wrap_report.py {data}/wrap.json {cwd}/wrap.md {png} "
        "> /dev/null", cwd)
    table = open(os.path.join(cwd, "wrap.md"), encoding="utf-8").read().rstrip("\n")
    ctx = json.load(open(os.path.join(data, "wrap.json"), encoding="utf-8"))["context"]
    log = open(os.path.join(data, "run.log"), encoding="utf-8").read()
    load = {k: re.search(rf"^load_{k} wrap (.*)$", log, re.M) for k in ("before", "after")}
    cmd = re.search(r"^command wrap (.*)$", log, re.M)
    rows = [[c.strip() for c in l.split("|")[1:-1]] for l in table.split("\n")[2:]]
    # (preset, wrap, exposed ms median, tokens/s median), as the table prints them
    med = [(r[0], r[1], r[7].split()[0], r[9].split()[0]) for r in rows]
    before = load["before"].group(1) if load["before"] else "?"
    after = load["after"].group(1) if load["after"] else "?"
    lines = ["```", cmd.group(1) if cmd else "build/bin/bench_wrap ...",
             f"/usr/bin/python3 bench/wrap_report.py docs/bench/data/wrap.json TABLE.md "
             "docs/img/wrap_sweep.png", "```", "", table, "",
             "![collectives, peak params_unsharded, exposed communication and tokens/s per wrap "
             "policy](img/wrap_sweep.png)", "",
             f"Measured by `make bench` on {ctx['date'][:10]} at {ctx['date'][11:16]} UTC on "
             f"{ctx['num_cpus']} CPUs (load average {before} before the suite and {after} after, "
             "docs/bench/data/run.log); 3 repetitions interleaved in random order: the table gives "
             "the median and the range."]
    for preset in ("small", "medium"):
        mine = [m for m in med if m[0] == preset]
        if not mine:
            continue
        most = max(mine, key=lambda m: float(m[2]))
        least = min(mine, key=lambda m: float(m[2]))
        fast = max(mine, key=lambda m: float(m[3]))
        slow = min(mine, key=lambda m: float(m[3]))
        lines.append(
            f"On {preset}, {most[1]} exposed the most communication ({most[2]} ms per step) and "
            f"{least[1]} the least ({least[2]} ms); tokens/s ranged from {slow[3]} ({slow[1]}) "
            f"to {fast[3]} ({fast[1]}).")
    return "\n".join(lines[:-2] + ["", " ".join(lines[-2:])])


def layers_svg(cwd):
    """docs/img/layers.svg, docs/design.md's picture of the layers (docs/layers_svg.py)."""
    run(f"python3 {ROOT}/docs/layers_svg.py {picture('docs/img/layers.svg')}", cwd)
    return None


def stages_svg(cwd):
    """docs/img/stages.svg, docs/design.md's picture of model -> stages -> units -> engine, from
    the engine's own wrap plans (docs/stages_svg.py runs build/bin/shardlab once per policy)."""
    run(f"python3 {ROOT}/docs/stages_svg.py --shardlab build/bin/shardlab "
        f"{picture('docs/img/stages.svg')}", cwd)
    return None


# ---- the table ---------------------------------------------------------------------------------

class Figure:
    """A figure: `make(cwd)` returns the block for `pages` (between the page's NAME markers;
    `marker` when the markers have another name), or None when it writes whole files and pictures
    only. `slow`: minutes, run only with --slow."""

    def __init__(self, name, pages, make, slow=False, marker=None):
        self.name, self.pages, self.make, self.slow = name, pages, make, slow
        self.marker = marker or "figure:" + name


FIGURES = [Figure(*row) for row in [
    ("demo", ["README.md", "docs/fsdp.md"], demo_table),
    ("lesson01", ["docs/lessons/01_data_parallel.md"], lesson_output(1, "data_parallel")),
    ("lesson02", ["docs/lessons/02_sharded_params.md"], lesson_output(2, "sharded_params")),
    ("lesson03", ["docs/lessons/03_sharded_grads.md"], lesson_output(3, "sharded_grads")),
    ("lesson04", ["docs/lessons/04_sharded_optimizer.md"], lesson_output(4, "sharded_optimizer")),
    ("lesson05", ["docs/lessons/05_hybrid.md"], lesson_output(5, "hybrid")),
    ("lesson05-steps20", ["docs/lessons/05_hybrid.md"], lesson5_twenty_steps),
    ("lesson05-steps60", ["docs/lessons/05_hybrid.md"], lesson5_sixty_steps),
    ("lesson02-viewer", ["docs/lessons/02_sharded_params.md"], viewer_pictures("lesson02")),
    ("lesson06-train", ["docs/lessons/06_from_lessons_to_core.md"], lesson6_train),
    ("lesson06-viewer", ["docs/lessons/06_from_lessons_to_core.md"], viewer_pictures("lesson06")),
    ("plan-tiny", ["docs/lessons/06_from_lessons_to_core.md"], plan_tiny),
    ("lessons-files", [], lessons_files),
    ("data-loss", ["docs/data.md"], data_table, True),
    ("summary-tiny", ["docs/observability.md"], summary_tiny),
    ("summary-compare", ["docs/collectives.md"], summary_compare),
    ("reliability-slow", ["docs/reliability.md"], reliability_slow),
    ("mpi-kill", ["docs/reliability.md"], mpi_kill),
    ("corpus", ["docs/reliability.md"], corpus_table, False, "corpus"),
    ("viewer-tour", ["docs/viewer-tour.md"], viewer_tour),
    ("viewer-step", ["docs/viewer.md"], viewer_pictures("step")),
    ("viewer-compare", ["docs/viewer.md"], viewer_pictures("compare")),
    ("viewer-live", ["docs/viewer.md"], viewer_pictures("live")),
    ("bench-explained", ["docs/bench/README.md"], bench_explained),
    ("bench-report", [], bench_report),
    ("offload-small", ["docs/fsdp.md"], offload_small),
    ("hsdp-overlap", ["docs/fsdp.md"], hsdp_overlap),
    ("attention-plan", ["docs/model.md"], attention_plan),
    ("llama-presets", ["docs/model.md"], llama_presets),
    ("import-fsdp2", ["docs/import.md"], import_fsdp2),
    ("import-gpu", ["docs/import.md"], import_gpu),
    ("wrap-sweep", ["docs/fsdp.md"], wrap_sweep),
    ("simulate-7b", ["docs/simulate.md"], simulate_7b),
    ("simulate-table", ["docs/simulate.md"], simulate_table),
    ("gpu-h100", ["docs/gpu.md"], gpu_h100),
    ("plan-zero", ["docs/memory.md"], plan_output(PLAN_ZERO)),
    ("plan-article", ["docs/memory.md"], plan_output(PLAN_ARTICLE)),
    ("plan-7b-a100", ["docs/memory.md"], plan_7b_a100),
    ("plan-speed", ["docs/memory.md"], plan_speed),
    ("plan-offload-tiny", ["docs/memory.md"], plan_offload_tiny),
    ("choosing-bandwidth", ["docs/choosing.md"], choosing("bandwidth")),
    ("choosing-memory", ["docs/choosing.md"], choosing("memory")),
    ("choosing-7b", ["docs/choosing.md"], choosing("recommend")),
    ("layers", [], layers_svg),
    ("stages", [], stages_svg),
]]
BY_NAME = {f.name: f for f in FIGURES}


def scratch_dir(build):
    """BUILD/docs-figures/ with build/ and data/ linked in it."""
    scratch = os.path.join(build, "docs-figures")
    os.makedirs(scratch, exist_ok=True)
    for name, target in (("build", build), ("data", os.path.join(ROOT, "data"))):
        link = os.path.join(scratch, name)
        if not os.path.lexists(link):
            os.symlink(target, link)
    return scratch


def make_figure(fig, scratch):
    """Runs one figure's maker; returns its block (marked), or None for a file figure."""
    print(f"{fig.name}:", flush=True)
    t0 = time.time()
    block = fig.make(scratch)
    print(f"  ({time.time() - t0:.0f} s)", flush=True)
    return block


def splice(page, marker, block, scratch):
    """Writes `block` (its timing marks removed) between the page's markers."""
    body = os.path.join(scratch, marker.replace(":", "_") + ".md")
    with open(body, "w", encoding="utf-8") as f:
        f.write(strip_marks(block) + "\n")
    subprocess.run([sys.executable, SPLICE, page, body, marker], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build directory (default build)")
    ap.add_argument("--slow", action="store_true", help="also the figures that take minutes")
    ap.add_argument("--list", action="store_true", help="list the figures and their pages")
    ap.add_argument("names", nargs="*", help="figures to regenerate (default: all)")
    a = ap.parse_args()
    if a.list:
        for f in FIGURES:
            print(f"{f.name:20} {'(slow) ' if f.slow else ''}{', '.join(f.pages) or '(files)'}")
        return
    unknown = [n for n in a.names if n not in BY_NAME]
    if unknown:
        sys.exit(f"docs/figures.py: unknown figure {unknown}; known: {', '.join(BY_NAME)}")
    scratch = scratch_dir(os.path.abspath(os.path.join(ROOT, a.build)))
    figs = [BY_NAME[n] for n in a.names] if a.names else [f for f in FIGURES
                                                         if a.slow or not f.slow]
    assert output_root() == ROOT
    for fig in figs:
        block = make_figure(fig, scratch)
        for page in fig.pages:
            if block is not None:
                splice(os.path.join(ROOT, page), fig.marker, block, scratch)


if __name__ == "__main__":
    main()
