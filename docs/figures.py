"""Regenerates the program outputs that pages quote (make docs-figures).

Every figure below names a page, the block between '<!-- figure:NAME:begin -->' and
'<!-- figure:NAME:end -->' on it, and the command whose output fills that block. The commands run
in a scratch directory (BUILD/docs-figures/, with BUILD linked there as build/, so a printed
`build/bin/...` reads as on the page) with one BLAS thread each, as `make lesson` and `make demo`
run them; tests/corpus/splice_table.py (the splicer of make reliability-table) writes each block.

    python3 docs/figures.py [--build build] [--slow] [NAME ...]

Without --slow only the figures that take seconds run; --slow adds those that take minutes (the
trained-loss table of docs/data.md). Names pick figures. The pages' other figures are listed in
docs/README.md (what this script does not regenerate, and why)."""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPLICE = os.path.join(ROOT, "tests", "corpus", "splice_table.py")


def run(cmd, cwd, timed=False):
    """Runs a shell command line in the scratch directory; returns its output (and CPU seconds)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    print(f"  $ {cmd}", flush=True)
    t0 = os.times()
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    t1 = os.times()
    if p.returncode != 0:
        sys.exit(f"docs/figures.py: `{cmd}` exited with {p.returncode}:\n{p.stdout[-3000:]}")
    cpu = t1.children_user - t0.children_user
    return (p.stdout, cpu) if timed else p.stdout


def fenced(lines):
    return "```\n" + "\n".join(lines).rstrip("\n") + "\n```"


# ---- figures ---------------------------------------------------------------------------------

def lesson_output(n, name):
    """A lesson's whole output with its defaults, as `make lesson N=n` prints it."""
    def make(cwd):
        return fenced(run(f"build/bin/lesson_0{n}_{name}", cwd).rstrip("\n").split("\n"))
    return make


def lesson5_sixty_steps(cwd):
    """Lesson 5 over 60 steps: the check line with the largest loss difference from lesson 1."""
    out = run("build/bin/lesson_05_hybrid --steps 60", cwd)
    line = [l for l in out.split("\n") if "loss curve matches lesson 1" in l]
    if len(line) != 1:
        sys.exit("docs/figures.py: lesson 5 printed no 'loss curve matches lesson 1' line")
    return fenced(['make lesson N=5 ARGS="--steps 60"', "...", line[0]])


def plan_tiny(cwd):
    """The planner on the lessons' model and batch: the model line and the strategy table."""
    cmd = "build/bin/shardlab plan --model tiny --ranks 4 --batch 2 --seq 64"
    out = run(cmd, cwd).split("\n\n")[0]
    return fenced([cmd] + out.split("\n"))


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
    """7b full_shard on 4 of the a100-40gb preset's GPUs, T = 2048, bf16: B 1..4 per rank, with
    and without act-ckpt, offload none / optim / params. One `shardlab plan` per row."""
    rows = ["| B per rank | act-ckpt | offload | device peak GiB | host peak GiB | fits 40 GiB | "
            "step s | tokens/s (4 ranks) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = ("build/bin/shardlab plan --model 7b --ranks 4 --seq 2048 --param-dtype bf16 "
            "--reduce-dtype bf16 --strategy full_shard --mem-limit 40GiB --cluster a100-40gb")
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
                # strategy N G params grads optim persist transient peak padding [host] fits
                # step tokens/s exposed
                peak = float(f[8]) / 1024
                host = float(f[10]) / 1024 if off != "none" else 0.0
                fits = f[11] if off != "none" else f[10]
                step_ms, tps = float(f[-3]), float(f[-2])
                rows.append(f"| {b} | {'yes' if ckpt else 'no'} | {off} | {peak:.1f} | "
                            f"{host:.1f} | {fits} | {step_ms / 1e3:.2f} | {tps:,.0f} |")
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
    load = open("/proc/loadavg").read().split()[0]
    return fenced([f"$ time {cmd.replace('build/bin/', '')}",
                   f"best of 3: {min(times):.2f} s wall (load average {load})"])


def demo_table(cwd):
    """`shardlab demo`'s closing table (README.md and docs/fsdp.md quote it)."""
    out = run("build/bin/shardlab demo", cwd)
    start = out.find("==== side by side")
    if start < 0:
        sys.exit("docs/figures.py: shardlab demo printed no '==== side by side' table")
    table = out[start:].split("\n\n")[0].split("\n")
    return fenced([l for l in table if not l.startswith("run directories")])


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
        rows.append(f"| {label} | {round(int(tokens[0]) / 1000)}k | {cpu / runs:.0f} s | {loss} | "
                    f"{float(above):.1f}% |")
    return "\n".join(rows)


def summary_tiny(cwd):
    """docs/observability.md: a short traced run and `shardlab summary` of it (the block is also
    run by the docs.commands test, hence its docs-test comment)."""
    train = "shardlab train --model tiny --ranks 2 --steps 6 --batch 4 --seq 32 --run-dir runs/t"
    run("build/bin/" + train + " --overwrite", cwd)
    out = run("build/bin/shardlab summary runs/t", cwd).rstrip("\n").split("\n")
    return "<!-- docs-test: run -->\n" + fenced([f"$ {train}", "$ shardlab summary runs/t"] + out)


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


# name: (pages, make(cwd) -> block, slow)
FIGURES = {
    "demo": (["README.md", "docs/fsdp.md"], demo_table, False),
    "lesson01": (["docs/lessons/01_data_parallel.md"], lesson_output(1, "data_parallel"), False),
    "lesson02": (["docs/lessons/02_sharded_params.md"], lesson_output(2, "sharded_params"), False),
    "lesson03": (["docs/lessons/03_sharded_grads.md"], lesson_output(3, "sharded_grads"), False),
    "lesson04": (["docs/lessons/04_sharded_optimizer.md"],
                 lesson_output(4, "sharded_optimizer"), False),
    "lesson05": (["docs/lessons/05_hybrid.md"], lesson_output(5, "hybrid"), False),
    "lesson05-steps60": (["docs/lessons/05_hybrid.md"], lesson5_sixty_steps, False),
    "plan-tiny": (["docs/lessons/06_from_lessons_to_core.md"], plan_tiny, False),
    "data-loss": (["docs/data.md"], data_table, True),
    "summary-tiny": (["docs/observability.md"], summary_tiny, False),
    "viewer-tour": (["docs/viewer-tour.md"], viewer_tour, False),
    "bench-explained": (["docs/bench/README.md"], bench_explained, False),
    "simulate-7b": (["docs/simulate.md"], simulate_7b, False),
    "simulate-table": (["docs/simulate.md"], simulate_table, False),
    "plan-zero": (["docs/memory.md"], plan_output(PLAN_ZERO), False),
    "plan-article": (["docs/memory.md"], plan_output(PLAN_ARTICLE), False),
    "plan-7b-a100": (["docs/memory.md"], plan_7b_a100, False),
    "plan-speed": (["docs/memory.md"], plan_speed, False),
    "choosing-bandwidth": (["docs/choosing.md"], choosing("bandwidth"), False),
    "choosing-memory": (["docs/choosing.md"], choosing("memory"), False),
    "choosing-7b": (["docs/choosing.md"], choosing("recommend"), False),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build directory (default build)")
    ap.add_argument("--slow", action="store_true", help="also the figures that take minutes")
    ap.add_argument("names", nargs="*", help=f"figures to regenerate: {', '.join(FIGURES)}")
    a = ap.parse_args()
    unknown = [n for n in a.names if n not in FIGURES]
    if unknown:
        sys.exit(f"docs/figures.py: unknown figure {unknown}; known: {', '.join(FIGURES)}")
    build = os.path.abspath(os.path.join(ROOT, a.build))
    scratch = os.path.join(build, "docs-figures")
    os.makedirs(scratch, exist_ok=True)
    link = os.path.join(scratch, "build")
    if not os.path.islink(link):
        os.symlink(build, link)
    if not os.path.exists(os.path.join(scratch, "data")):
        os.symlink(os.path.join(ROOT, "data"), os.path.join(scratch, "data"))
    names = a.names or [n for n, f in FIGURES.items() if a.slow or not f[2]]
    for name in names:
        pages, make, _ = FIGURES[name]
        print(f"{name}:", flush=True)
        t0 = time.time()
        block = make(scratch)
        body = os.path.join(scratch, name + ".md")
        with open(body, "w", encoding="utf-8") as f:
            f.write(block + "\n")
        for page in pages:
            subprocess.run([sys.executable, SPLICE, os.path.join(ROOT, page), body,
                            "figure:" + name], check=True)
        print(f"  ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
