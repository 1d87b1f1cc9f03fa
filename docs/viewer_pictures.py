"""The viewer's pictures on docs/viewer.md and in lessons 2 and 6, with the captions that read
them: made from real runs, the numbers of each caption taken from the same runs and from what the
viewer reports it drew (its screenshot report: panel rectangles, marks, the summary table as text).

`make docs-figures` runs it (figures viewer-step, viewer-compare, viewer-live, lesson02-viewer,
lesson06-viewer); alone, with the pages rewritten:

    python3 docs/figures.py viewer-step viewer-compare viewer-live lesson02-viewer lesson06-viewer

Needs xvfb-run (Debian: xvfb xauth). timed_regions() says which parts of a screenshot depend on
timing, for docs-check (docs/README.md, "Keeping figures true")."""
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figlib import T, fenced, loadavg, picture, run  # noqa: E402

MiB = 1 << 20
XVFB = "xvfb-run -a -s '-screen 0 {w}x{h}x24'"

# Summary rows whose text depends on timing (viewer/app/panels/summary.cpp): docs-check leaves
# their pixels out, and the captions mark them.
TIMED_ROWS = ("steps, mean time", "tokens/s (all ranks)", "busbw", "waiting for ranks",
              "straggler", "comm, exposed /step")


def timed_regions(report):
    """The rectangles of a screenshot whose pixels depend on timing, from the viewer's report:
    the toolbar (view start, ns per pixel), each run's memory, timeline and unit plots (their
    horizontal axis is time), the summary rows of TIMED_ROWS and the selected step's row, and the
    callouts of --mark (placed at a time).
    What stays compared: panel titles, row labels (ranks, units), legends, the summary's
    strategy, loss, peak and bytes rows, and the peak-memory bars."""
    rects = [report["panels"]["toolbar"]]
    # A plot's bars may start a few pixels left of its reported rectangle (rounding, a bar's
    # border at the plot's first time): each plot's rectangle widened by a tile on both sides.
    def widened(rc):
        return [rc[0] - 8, rc[1], rc[2] + 16, rc[3]]

    for r in report["panels"]["runs"]:
        rects += [widened(r["memory_plot"]), widened(r["timeline_plot"]),
                  widened(r["units_plot"])]
        rects += r.get("host_rows", []) + r.get("copy_lanes", [])
    for row in report.get("summary_rows", []):
        if row["name"] in TIMED_ROWS or row["name"].startswith("step "):
            rects.append(row["rect"])
    # A --mark's numbered disc stands above its point (viewer/app/marks.cpp: a radius of 10 px on
    # a 12 px stem), possibly outside the plot it marks; its place is a time.
    for m in report.get("marks", []):
        rects.append([m["x"] - 14, m["y"] - 36, 28, 40])
    return ([[round(v) for v in rc] for rc in rects if rc[2] > 0 and rc[3] > 0],
            "toolbar, memory/timeline/unit plots, timed summary rows")


def summary_text(report):
    """The summary table of a screenshot as text lines, timing rows marked."""
    runs = [r["name"] for r in report["panels"]["runs"]]
    rows = [["", *runs]] + [[r["name"], *r["cells"]] for r in report.get("summary_rows", [])]
    width = max(len(r[0]) for r in rows)
    lines = []
    for r in rows:
        cells = [T(c) if (r[0] in TIMED_ROWS or r[0].startswith("step ")) else c for c in r[1:]]
        lines.append(f"{r[0]:<{width}} | " + " | ".join(cells))
    return lines


def row(report, name):
    for r in report.get("summary_rows", []):
        if r["name"] == name:
            return r["cells"]
    sys.exit(f"docs/viewer_pictures.py: the viewer's summary has no row '{name}'")


class Events:
    """A run directory's events, by rank."""

    def __init__(self, path):
        self.meta = json.load(open(os.path.join(path, "meta.json")))
        self.n = self.meta["world_size"]
        self.ranks = []
        for r in range(self.n):
            with open(os.path.join(path, f"rank{r}.jsonl")) as f:
                self.ranks.append([json.loads(line) for line in f if line.strip()])

    def step_window(self, rank, step):
        own = {e["step"]: e["t"] for e in self.ranks[rank] if e["kind"] == "step"}
        return own.get(step - 1, 0), own[step]

    def spans(self, rank, step, lane=None, op=None):
        t0, t1 = self.step_window(rank, step)
        return sorted((e for e in self.ranks[rank] if e["kind"] == "span"
                       and t0 <= e["t_start"] < t1 and (lane is None or e["lane"] == lane)
                       and (op is None or e["op"] == op)), key=lambda e: e["t_start"])

    def persistent(self, rank):
        """params + grads + optimizer_state of the rank after its first step (bytes)."""
        cats = {}
        t_end = self.step_window(rank, 1)[1]
        for e in self.ranks[rank]:
            if e["kind"] == "mem" and e.get("tier", "device") == "device" and e["t"] <= t_end:
                cats[e["category"]] = e["cat_total"]
        return sum(cats.get(c, 0) for c in ("params", "grads", "optimizer_state"))


def covered(span, spans):
    """ns of the span covered by the union of `spans`."""
    got, cur = 0, span["t_start"]
    for s in sorted(spans, key=lambda s: s["t_start"]):
        a, b = max(s["t_start"], cur), min(s["t_end"], span["t_end"])
        if b > a:
            got += b - a
            cur = b
    return got


def ms(ns):
    return T(f"{ns / 1e6:.1f} ms")


def mib(b):
    return f"{b / MiB:.2f} MiB"


def shoot(cwd, runs, png, w, h, extra=""):
    """A viewer screenshot of `runs` into cwd/png; returns its report."""
    out = os.path.join(cwd, png)
    run(f"{XVFB.format(w=w + 120, h=h + 100)} build/bin/shardlab-viewer {runs} --width {w} "
        f"--height {h} --screenshot {out} --frames 4 {extra}", cwd)
    return json.load(open(out[:-4] + ".json"))


def place(cwd, rel, png, report, mouse=None, timed_rows=()):
    """Moves the screenshot cwd/png to `rel` under the output root, recording its timed regions
    and, with `mouse`, the tooltip's: it opens where the mouse points, a place that is a time, and
    holds times. ImGui draws it below and right of the pointer (these pictures point away from the
    window's right and bottom edges, where it would flip)."""
    regions, note = timed_regions(report)
    # Rows that depend on timing in this picture only (a live run: which step was the last).
    for row in report.get("summary_rows", []):
        if row["name"] in timed_rows:
            regions.append([round(v) for v in row["rect"]])
            note += ", " + row["name"]
    if mouse:
        regions.append([mouse[0] - 40, mouse[1] - 40, 500, 300])
        note += ", the tooltip"
    os.replace(os.path.join(cwd, png), picture(rel, regions, note))


def mark_position(cwd, runs, spec, w, h, extra=""):
    """Where the viewer draws a --mark: the pixel to put the mouse on for that span's tooltip."""
    rep = shoot(cwd, runs, "probe.png", w, h, f"{extra} --mark {spec}")
    m = rep["marks"][0]
    if not m["shown"]:
        sys.exit(f"docs/viewer_pictures.py: mark {spec} fell outside its panel: {m}")
    return round(m["x"]), round(m["y"]) + 4  # the mark's point is the bar's or stack's top edge


# ---- docs/viewer.md -----------------------------------------------------------------------------

TRAIN20 = ("build/bin/shardlab train --model small --ranks 4 --steps 20 --mem-limit 80MiB "
           "--overwrite --strategy {s} --run-dir runs/{d}")
STEP = 5


def train_pair(cwd):
    for s, d in (("no_shard", "dp"), ("full_shard", "fsdp")):
        run(TRAIN20.format(s=s, d=d), cwd)
    return Events(os.path.join(cwd, "runs", "dp")), Events(os.path.join(cwd, "runs", "fsdp"))


def step(cwd):
    """viewer.md's first picture: full_shard at step 5, the mouse on rank 0's last all-gather of
    the forward pass, its tooltip open."""
    run(TRAIN20.format(s="full_shard", d="fsdp"), cwd)
    ev = Events(os.path.join(cwd, "runs", "fsdp"))
    bwd0 = min(s["t_start"] for s in ev.spans(0, STEP, "compute", "backward"))
    fwd_ags = [s for s in ev.spans(0, STEP, "comm", "all_gather") if s["t_start"] < bwd0]
    ag = max(fwd_ags, key=lambda s: s["unit"])
    compute = ev.spans(0, STEP, "compute")
    hidden = covered(ag, compute)
    dur = ag["t_end"] - ag["t_start"]
    names = [u["name"] for u in ev.meta["units"]]
    w, h = 1600, 1000
    x, y = mark_position(cwd, "runs/fsdp", f"1:comm:0:{(ag['t_start'] + ag['t_end']) // 2}", w, h,
                         f"--at-step {STEP}")
    rep = shoot(cwd, "runs/fsdp", "viewer_fsdp_step.png", w, h,
                f"--at-step {STEP} --mouse {x} {y}")
    place(cwd, "docs/img/viewer_fsdp_step.png", "viewer_fsdp_step.png", rep, (x, y))
    peak = row(rep, "peak / rank (max)")[0]
    gaps = (": the gaps in the forward bars above it" if dur - hidden >= 0.05e6
            else ": prefetch hid it behind the previous unit's forward")
    cmd = TRAIN20.format(s="full_shard", d="fsdp").replace("build/bin/", "")
    lines = [
        f"![FSDP, step {STEP}, hovering an all-gather](img/viewer_fsdp_step.png)", "",
        f"*`{cmd}`, then `shardlab-viewer runs/fsdp --at-step {STEP}` with the mouse on rank 0's "
        f"all-gather of unit {ag['unit']} ({names[ag['unit']]}), the last of the forward pass "
        f"(made by `make docs-figures`, docs/viewer_pictures.py; load average {loadavg()}). The "
        f"tooltip gives its op, unit, bytes and dtype, start and duration, queueing after issue, "
        f"when the rank waited on it, algbw and busbw, and how much of it was exposed. It ran "
        f"{ms(dur)}, of which {ms(hidden)} under rank 0's compute and {ms(dur - hidden)} with "
        f"nothing computing{T(gaps)}. In forward the comm lanes "
        f"hold only all-gathers; in backward each unit's all-gather is followed by its "
        f"reduce-scatter; the last bar of the step is the 4-byte all-reduce of the loss. The unit "
        f"lanes show every unit gathered twice per step, the root (unit 0) held from the "
        f"embedding to the loss and again from the head's backward to the embedding's. Memory "
        f"peaks at {peak} (the capacity line) per rank.*"]
    return "\n".join(lines)


def optimizer_ms(ev, step):
    return sum(s["t_end"] - s["t_start"] for s in ev.spans(0, step, "compute", "optimizer"))


def compare(cwd):
    """viewer.md's compare picture: no_shard and full_shard, step 5, with the summary as text."""
    dp, fs = train_pair(cwd)
    w, h = 1600, 1000
    # The mouse on DDP's memory stack of rank 0 at its peak in the step: its tooltip.
    mem = [e for e in dp.ranks[0] if e["kind"] == "mem" and e.get("tier", "device") == "device"
           and dp.step_window(0, STEP)[0] <= e["t"] < dp.step_window(0, STEP)[1]]
    at = max(mem, key=lambda e: e["total"])
    x, y = mark_position(cwd, "runs/dp runs/fsdp", f"1:memory:0:{at['t']}:0", w, h,
                         f"--at-step {STEP}")
    rep = shoot(cwd, "runs/dp runs/fsdp", "viewer_compare.png", w, h,
                f"--at-step {STEP} --mouse {x} {y}")
    place(cwd, "docs/img/viewer_compare.png", "viewer_compare.png", rep, (x, y))
    opt = {k: statistics.median(optimizer_ms(e, s) for s in range(2, 21))
           for k, e in (("dp", dp), ("fs", fs))}
    loss = row(rep, "loss at the last step")
    peak = row(rep, "peak / rank (max)")
    ar, ag, rs = (row(rep, f"{op} /step") for op in ("all_reduce", "all_gather", "reduce_scatter"))
    lines = [
        "```",
        TRAIN20.format(s="no_shard", d="dp"), TRAIN20.format(s="full_shard", d="fsdp"),
        f"{XVFB.format(w=w + 120, h=h + 100)} build/bin/shardlab-viewer runs/dp runs/fsdp "
        f"--width {w} --height {h} --at-step {STEP} --mouse X Y --screenshot viewer_compare.png",
        "```", "",
        f"![DP vs FSDP, step {STEP}](img/viewer_compare.png)", "",
        f"*The same model, batch and seed trained for 20 steps with `--strategy no_shard` (left, "
        f"`runs/dp`) and `--strategy full_shard` (right, `runs/fsdp`) on 4 local ranks, step "
        f"{STEP} of each, the mouse on rank 0's memory at its peak in the step (made by `make "
        f"docs-figures`, docs/viewer_pictures.py; load average {loadavg()}). **Memory:** "
        f"no_shard's stack stands on {mib(dp.persistent(0))} of full parameters, gradients and "
        f"Adam state and peaks at {peak[0]} per rank; full_shard keeps a quarter of that "
        f"({mib(fs.persistent(0))}) and peaks at {peak[1]}, with gathered parameters and unit "
        f"gradients coming and going. **Timeline:** no_shard computes forward without a single "
        f"collective, all-reduces each unit's gradient during backward and then runs AdamW over "
        f"all {dp.meta['model']['num_params'] / 1e6:.1f}M parameters on every rank; full_shard "
        f"all-gathers every unit before its forward and again before its backward, "
        f"reduce-scatters each unit's gradient, and runs AdamW over a quarter of the parameters "
        f"(rank 0's optimizer, median over steps 2 to 20: {ms(opt['fs'])} against "
        f"{ms(opt['dp'])}). **Summary:** the same loss at the last step ({loss[0]} and "
        f"{loss[1]}: the strategies are bit-identical); per step, each rank sends "
        f"{ar[0].split(',')[0].replace('sent per rank ', '')} in DDP's all-reduces against "
        f"{ag[1].split(',')[0].replace('sent per rank ', '')} of all-gathers plus "
        f"{rs[1].split(',')[0].replace('sent per rank ', '')} of reduce-scatters in full_shard "
        f"(the 1.5x of the demo's table; the rows also give each collective's buffer, labelled "
        f"\"buffer\", from which busbw is computed, as nccl-tests do). The table as the viewer "
        f"drew it:*", "",
        fenced(summary_text(rep)), "",
        "Here the ranks are threads on 2 cores, so collectives (memory copies) compete with "
        "compute for the same cores; the times in the table say nothing about a network."]
    return "\n".join(lines)


def live(cwd):
    """viewer.md's live picture: the viewer started before a 40-step run writes its directory."""
    w, h = 1600, 1000
    subprocess.run(["rm", "-rf", os.path.join(cwd, "runs", "live")], check=True)
    cmd = ("build/bin/shardlab train --model small --ranks 4 --strategy full_shard --steps 40 "
           "--mem-limit 80MiB --run-dir runs/live")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    trainer = subprocess.Popen(["bash", "-c", f"sleep 1; {cmd} > live.log"], cwd=cwd, env=env)
    try:
        rep = shoot(cwd, "runs/live", "viewer_live.png", w, h, "--until-steps 6 --timeout 120")
    finally:
        trainer.wait()
    # Live, the last step the viewer had read when it took the picture depends on timing.
    place(cwd, "docs/img/viewer_live.png", "viewer_live.png", rep,
          timed_rows=("loss at the last step",))
    r = rep["panels"]["runs"][0]
    lines = [
        "```",
        f"({cmd.replace('build/bin/', '')}) &",
        f"shardlab-viewer runs/live --until-steps 6 --screenshot viewer_live.png",
        "```", "",
        "![Following a run being written](img/viewer_live.png)", "",
        f"*Captured while `shardlab train` was still writing its 40 steps (made by `make "
        f"docs-figures`, docs/viewer_pictures.py): the run was "
        f"{T('finished' if r['finished'] else 'not finished')} and the viewer had read "
        f"{T(r['steps'])} steps of it when it took the picture; the toolbar says `live` and "
        f"`follow` is ticked, so the view holds the last three steps and the summary counts "
        f"the steps every rank has finished.*"]
    return "\n".join(lines)


# ---- the lessons --------------------------------------------------------------------------------

def lesson02(cwd):
    """Lesson 2's run directory at step 3."""
    run("build/bin/lesson_02_sharded_params --steps 5 > lesson02.log", cwd)
    w, h = 1600, 900
    rep = shoot(cwd, "runs/lesson02", "02_viewer.png", w, h, "--at-step 3")
    place(cwd, "docs/lessons/img/02_viewer.png", "02_viewer.png", rep)
    ev = Events(os.path.join(cwd, "runs", "lesson02"))
    per_unit = {}
    for s in ev.spans(0, 3, "comm", "all_gather"):
        per_unit[s["unit"]] = per_unit.get(s["unit"], 0) + 1
    ags = sum(per_unit.values())
    sent = row(rep, "all_gather /step")[0]
    lines = [
        "```",
        'make lesson N=2 ARGS="--steps 5"',
        f"{XVFB.format(w=w + 120, h=h + 100)} build/bin/shardlab-viewer runs/lesson02 "
        f"--at-step 3 --width {w} --height {h} --screenshot docs/lessons/img/02_viewer.png",
        "```", "",
        f"On every rank, compute alternates with all-gathers, then come the all-reduces and the "
        f"optimizer. Rank 0 ran {ags} all-gathers in step 3 (per unit: "
        f"{', '.join(f'{u}: {k}' for u, k in sorted(per_unit.items()))}); "
        f"the summary's all_gather row reads \"{sent}\", per step and rank. The unit lanes show "
        f"each unit going `gathering → unsharded → resharded` twice per step, and the memory "
        f"lanes the gathered unit (`params_unsharded`) coming and going:", "",
        "![lesson 2 in the viewer](img/02_viewer.png)"]
    return "\n".join(lines)


LESSON6_TRAIN = ("build/bin/shardlab train --model tiny --ranks 4 --steps 5 --batch 8 --seq 64 "
                 "--lr 3e-3 --warmup 0 --schedule constant --strategy full_shard "
                 "--run-dir runs/engine_full --overwrite")


def lesson06(cwd):
    """Lesson 4 and the engine's full_shard, 5 steps each, side by side at step 3."""
    run("build/bin/lesson_04_sharded_optimizer --steps 5 > lesson04.log", cwd)
    run(LESSON6_TRAIN, cwd)
    w, h = 1600, 900
    rep = shoot(cwd, "runs/lesson04 runs/engine_full", "06_viewer_compare.png", w, h,
                "--at-step 3")
    place(cwd, "docs/lessons/img/06_viewer_compare.png", "06_viewer_compare.png", rep)
    lesson = Events(os.path.join(cwd, "runs", "lesson04"))
    engine = Events(os.path.join(cwd, "runs", "engine_full"))
    loss = [next(e["loss"] for e in ev.ranks[0] if e["kind"] == "step" and e["step"] == 3)
            for ev in (lesson, engine)]
    comm = row(rep, "comm, exposed /step")
    ag = row(rep, "all_gather /step")
    lines = [
        "```",
        'make lesson N=4 ARGS="--steps 5"',
        LESSON6_TRAIN.replace(" --overwrite", ""),
        "build/bin/shardlab-viewer runs/lesson04 runs/engine_full",
        "```", "",
        "![lesson 4 and the engine's full_shard in the viewer](img/06_viewer_compare.png)", "",
        f"Losses at step 3: {loss[0]:.4f} and {loss[1]:.4f}. Bytes per step and rank: the "
        f"lesson's all-gathers \"{ag[0]}\", the engine's \"{ag[1]}\". In the engine's unit lanes "
        f"the next unit is already `gathering` while the current one computes, and its memory "
        f"lanes carry more gathered units at once than the lesson's. Its summary row \"comm, "
        f"exposed /step\" reads \"{T(comm[1])}\" against the lesson's \"{T(comm[0])}\" (the "
        f"overlapped share is what prefetch hid behind compute). On this 2-core machine, with "
        f"ranks as threads sharing the cores, there is little to overlap with; on GPUs with their "
        f"own links it is the difference between waiting for every all-gather and almost never "
        f"waiting. (Made by `make docs-figures`, docs/viewer_pictures.py, the viewer command "
        f"under `xvfb-run` with `--at-step 3 --screenshot docs/lessons/img/06_viewer_compare.png "
        f"--width {w} --height {h}`; load average {loadavg()}.)"]
    return "\n".join(lines)
