"""The pictures and numbered callouts of docs/viewer-tour.md.

`make docs-figures` runs it (figure `viewer-tour`); alone, with the page rewritten:

    python3 docs/figures.py viewer-tour

It trains three short runs (DDP and FSDP side by side, and FSDP with one slow rank), reads their
events the way the viewer does, picks the moments the page talks about (the most exposed
all-gather, the memory peak, a unit gathered again for backward, ...), asks the viewer for
screenshots with a numbered mark on each (`shardlab-viewer --mark`), and prints the page's
callout list with the numbers of these runs. Needs xvfb-run (Debian: xvfb xauth)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figlib import T, loadavg, picture, run as sh  # noqa: E402  (shared by all figure makers)
from viewer_pictures import timed_regions  # noqa: E402
MiB = 1 << 20
STEP = 4  # the step every picture shows: past the first steps' warm-up

# Commands as the page prints them (run from a scratch directory with build/ linked in it).
TRAIN = "build/bin/shardlab train --model small --ranks 4 --steps 6 --mem-limit 80MiB --overwrite"
RUNS = {
    "dp": f"{TRAIN} --strategy no_shard --run-dir runs/tour-dp",
    "fsdp": f"{TRAIN} --strategy full_shard --run-dir runs/tour-fsdp",
    "slow": f"{TRAIN} --strategy full_shard --slow-rank 3:2 --run-dir runs/tour-slow",
}
VIEWER = ("xvfb-run -a -s '-screen 0 1920x1500x24' build/bin/shardlab-viewer {runs} "
          f"--at-step {STEP} --width 1800 --height 1400 --screenshot {{png}}")


class Run:
    """One run directory's events by rank, and its steps as the viewer draws them."""

    def __init__(self, path):
        self.meta = json.load(open(os.path.join(path, "meta.json")))
        self.n = self.meta["world_size"]
        self.unit_names = [u["name"] for u in self.meta.get("units", [])]
        self.events = []
        for r in range(self.n):
            with open(os.path.join(path, f"rank{r}.jsonl")) as f:
                self.events.append([json.loads(line) for line in f if line.strip()])
        # A step ends at its latest step event over the ranks and begins where the previous ended
        # (viewer/model/steps.hpp).
        # A rank's own step runs between its own step events: a fast rank may already gather for
        # the next step while the viewer still shows this one. Counts use the rank's own step;
        # marks must fall inside the viewer's.
        ends, self.own = {}, []
        for evs in self.events:
            own = {e["step"]: e["t"] for e in evs if e["kind"] == "step"}
            self.own.append((own[STEP - 1], own[STEP]))
            for e in evs:
                if e["kind"] == "step":
                    ends[e["step"]] = max(ends.get(e["step"], 0), e["t"])
        self.shown = (ends[STEP - 1], ends[STEP])

    def in_step(self, rank, t):
        return self.own[rank][0] <= t < self.own[rank][1]

    def visible(self, t):
        return self.shown[0] <= t < self.shown[1]

    def spans(self, rank, lane=None, op=None):
        return sorted((e for e in self.events[rank]
                       if e["kind"] == "span" and self.in_step(rank, e["t_start"])
                       and (lane is None or e["lane"] == lane) and (op is None or e["op"] == op)),
                      key=lambda e: e["t_start"])

    def units_at(self, rank, t):
        """The units that are gathering or unsharded on `rank` at time t."""
        state = {}
        for e in self.events[rank]:
            if e["kind"] == "unit" and e["t"] <= t:
                state[e["unit"]] = e["state"]
        return sorted(u for u, st in state.items() if st in ("gathering", "unsharded"))

    def memory_at(self, rank):
        """Rank's mem events in the step, each with the categories' totals right after it."""
        cats, out = {}, []
        for e in self.events[rank]:
            if e["kind"] != "mem":
                continue
            cats[e["category"]] = e["cat_total"]
            if self.in_step(rank, e["t"]):
                out.append((e, dict(cats)))
        return out


def covered(t0, t1, spans):
    """ns of [t0, t1) covered by the union of the spans' [t_start, t_end)."""
    got, cur = 0, t0
    for s in sorted(spans, key=lambda s: s["t_start"]):
        a, b = max(s["t_start"], cur), min(s["t_end"], t1)
        if b > a:
            got += b - a
            cur = b
    return got


def mid(span):
    return (span["t_start"] + span["t_end"]) // 2


def ms(ns):
    """A duration: timing, so docs-check accepts any value in its place."""
    return T(f"{ns / 1e6:.1f} ms")


def mib(b):
    return f"{b / MiB:.2f} MiB"


def uname(run, u):
    """A unit as the viewer's units strip labels it: `unit 2 (block 1)`."""
    return f"unit {u} ({run.unit_names[u]})" if u < len(run.unit_names) else f"unit {u}"


def first_backward(run, rank):
    return min(s["t_start"] for s in run.spans(rank, "compute", "backward"))


def scene_side_by_side(dp, fsdp):
    """Marks 1-6 and their lines: FSDP's exposed gather, its peak, a second gather, a unit's strip,
    DDP's all-reduces and the two optimizer steps."""
    marks, lines = [], []
    r = 0
    compute = fsdp.spans(r, "compute")
    bwd0 = first_backward(fsdp, r)

    # 1: the all-gather that held rank 0's compute up the longest: from when the compute asked
    # for it (t_wait) to when it completed.
    def exposed(s):
        return (s["t_end"] - s["t_start"]) - covered(s["t_start"], s["t_end"], compute)

    def stall(s):
        return s["t_end"] - max(s["t_wait"], s["t_start"]) if s["t_wait"] >= 0 else 0
    ags = fsdp.spans(r, "comm", "all_gather")
    # Prefetched ones (issued before the compute asked): the step's first gather never is.
    worst = max((s for s in ags if fsdp.visible(mid(s)) and s["t_wait"] > s["t_issue"]), key=stall)
    first = ags[0]
    phase = "forward" if worst["t_start"] < bwd0 else "backward"
    marks.append(f"1:comm:{r}:{(worst['t_start'] + worst['t_end']) // 2}:1")
    total_exposed = sum(exposed(s) for s in fsdp.spans(r, "comm"))
    lines.append(
        f"1. **An exposed all-gather**: of rank 0's all-gathers in step {STEP}, the one its "
        f"compute waited on longest, {T(uname(fsdp, worst['unit']))}'s in the {T(phase)} pass. Prefetch issued "
        f"it {ms(max(worst['t_wait'] - worst['t_issue'], 0))} before the compute asked for it, "
        f"but it ran {ms(worst['t_end'] - worst['t_start'])} and the compute stalled "
        f"{ms(stall(worst))} until it completed: the gap in the compute lane above the bar, and "
        f"the red underline below it ({ms(exposed(worst))} of this bar ran with nothing computing "
        f"on rank 0). Of the bar, {ms(worst.get('wait', 0))} was rank 0 waiting for the last rank "
        f"to arrive: here 4 ranks share 2 cores, so a collective also waits for the scheduler (on "
        f"a cluster, this is where a slow link or a slow GPU shows). The step's first all-gather "
        f"({uname(fsdp, first['unit'])}'s, at the left edge, {ms(first['t_end'] - first['t_start'])}) is "
        f"exposed whole: nothing runs before it to hide behind. Rank 0's exposed "
        f"communication in this step adds up to {ms(total_exposed)}; `shardlab summary` prints "
        f"the run's mean per step.")

    # 2: rank 0's memory peak in the step, with what it holds.
    mem = fsdp.memory_at(r)
    peak_e, cats = max((m for m in mem if fsdp.visible(m[0]["t"])), key=lambda x: x[0]["total"])
    marks.append(f"2:memory:{r}:{peak_e['t']}:1")
    where = "in the forward pass" if peak_e["t"] < bwd0 else "in the backward pass"
    held = fsdp.units_at(r, peak_e["t"])
    order = ["params", "grads", "optimizer_state", "params_unsharded", "grads_unsharded",
             "activations", "comm_buffers", "workspace"]
    parts = ", ".join(f"{c} {mib(cats[c])}" for c in order if cats.get(c, 0) > 0)
    persistent = sum(cats.get(c, 0) for c in ("params", "grads", "optimizer_state"))
    lines.append(
        f"2. **The memory peak** of rank 0, {mib(peak_e['total'])} {where}: {parts}. The bottom "
        f"three bands (the shards every rank keeps: {mib(persistent)}, a quarter of DDP's) do not "
        f"move. On top come the gathered parameters (light blue) of the units held at that "
        f"moment, {', '.join(uname(fsdp, u) for u in held)}"
        f"{': the root, the block computing and, with prefetch 1, the next' if len(held) == 3 and 0 in held else ''}"
        f"; the unsharded gradients being reduced (light orange); and the activations "
        f"(purple), which grow through the forward pass and are freed as backward consumes them, "
        f"so the peak comes around the turn from forward to backward. DDP's column shows the same "
        f"shape standing on four times the bottom, without the light blue.")

    # 3: a unit's second all-gather: the one backward needs.
    by_unit = {}
    for s in sorted(ags, key=lambda s: s["t_start"]):
        by_unit.setdefault(s["unit"], []).append(s)
    unit = min(u for u, g in by_unit.items() if len(g) >= 2 and u > 0)  # longest at rest
    again = by_unit[unit][1]
    marks.append(f"3:comm:{r}:{(again['t_start'] + again['t_end']) // 2}:1")
    sent = {}
    for s in fsdp.spans(r, "comm"):
        sent[s["op"]] = sent.get(s["op"], 0) + s.get("sent", 0)
    dp_sent = sum(s.get("sent", 0) for s in dp.spans(r, "comm"))
    fs_buffer = sum(s.get("bytes", 0) for s in fsdp.spans(r, "comm"))
    dp_buffer = sum(s.get("bytes", 0) for s in dp.spans(r, "comm"))
    n_ag = {u: len(g) for u, g in by_unit.items()}
    lines.append(
        f"3. **Backward gathers again**: {uname(fsdp, unit)}'s second all-gather of the step. full_shard "
        f"freed the unit's full parameters after its forward (that is the saving in 2), so its "
        f"backward, which needs them for the input gradients, gathers them once more. Rank 0 ran "
        f"{sum(n_ag.values())} all-gathers for {len(n_ag)} units in this step (per unit: "
        f"{', '.join(f'{u}: {k}' for u, k in sorted(n_ag.items()))}; {uname(fsdp, 0)} holds both "
        f"the embedding and the head, used at the two ends of the model), and one "
        f"reduce-scatter per unit. Rank 0 sent {mib(sent.get('all_gather', 0))} in "
        f"all-gathers and {mib(sent.get('reduce_scatter', 0))} in reduce-scatters in this step "
        f"against DDP's {mib(dp_sent)} in all-reduces: "
        f"{(sent.get('all_gather', 0) + sent.get('reduce_scatter', 0)) / max(dp_sent, 1):.2f} times "
        f"as much sent per rank, the 3Ψ(N−1)/N against 2Ψ(N−1)/N of docs/fsdp.md. Their buffers "
        f"(the collectives' full sizes) total {mib(fs_buffer)} against DDP's {mib(dp_buffer)}: "
        f"{fs_buffer / max(dp_buffer, 1):.2f} times, 3Ψ against Ψ.")

    # 4: the unit strip of the same unit, in its resharded stretch between forward and backward.
    states = [e for e in fsdp.events[r] if e["kind"] == "unit" and e["unit"] == unit]
    t_fwd_end = by_unit[unit][0]["t_end"]
    resh = [e for e in states if e["state"] == "resharded" and t_fwd_end <= e["t"] < again["t_start"]]
    t_mark = (resh[0]["t"] + again["t_start"]) // 2 if resh else again["t_start"]
    marks.append(f"4:units:{unit}:{t_mark}:1")
    names = {"sharded": "sharded (dark slate)", "gathering": "gathering (amber)",
             "unsharded": "unsharded (green)", "resharded": "resharded (light steel)"}

    def sequence(u):
        seq = [e["state"] for e in fsdp.events[r] if e["kind"] == "unit" and e["unit"] == u
               and fsdp.in_step(r, e["t"])]
        return " → ".join(names.get(x, x) for x in seq)
    lines.append(
        f"4. **The units strip** (rank 0, one row per unit; the mark is on {uname(fsdp, unit)}, "
        f"resharded between its forward and its backward). In this step it went "
        f"{sequence(unit)}; {uname(fsdp, 0)} went {sequence(0)}. Gathering is an all-gather in "
        f"flight; unsharded is the unit's full parameters in memory (the light blue of the "
        f"memory panel); resharded is a unit freed again after use, the same memory as sharded. "
        f"Dark slate (sharded) shows only before a unit's first gather of the run; from then "
        f"on, a unit at rest is light steel. The staircase of amber is prefetch: each unit starts "
        f"gathering while the one before it still computes.")

    # 5: DDP's largest all-reduce, and 6: the optimizer steps of both.
    ars = dp.spans(r, "comm", "all_reduce")
    big = max((s for s in ars if dp.visible(mid(s))), key=lambda s: s["bytes"])
    marks.append(f"5:comm:{r}:{(big['t_start'] + big['t_end']) // 2}:0")
    lines.append(
        f"5. **DDP, for contrast**: no collective in the forward pass; in backward, each unit's "
        f"gradient is all-reduced as soon as it is complete ({len(ars)} all-reduces, the largest "
        f"{mib(big['bytes'])} of buffer), under the next unit's backward compute.")
    opt_dp = dp.spans(r, "compute", "optimizer")
    opt_fs = fsdp.spans(r, "compute", "optimizer")
    d_dp = sum(s["t_end"] - s["t_start"] for s in opt_dp)
    d_fs = sum(s["t_end"] - s["t_start"] for s in opt_fs)
    marks.append(f"6:compute:{r}:{(opt_dp[0]['t_start'] + opt_dp[-1]['t_end']) // 2}:0")
    marks.append(f"6:compute:{r}:{(opt_fs[0]['t_start'] + opt_fs[-1]['t_end']) // 2}:1")
    lines.append(
        f"6. **The optimizer step** (brown): DDP's AdamW updates all "
        f"{dp.meta['model']['num_params'] / 1e6:.1f}M parameters on every rank, {ms(d_dp)} on "
        f"rank 0; full_shard's updates the rank's quarter, {ms(d_fs)}. Sharding divides the "
        f"optimizer's work by N as well as its memory, and the 4 ranks share 2 cores here, so "
        f"whatever one rank saves the others get.")
    return marks, lines


def scene_slow_rank(slow, summary):
    """Marks 7 and 8: the rank made slow, and what the others wait."""
    marks, lines = [], []
    n = slow.n
    compute = {r: sum(s["t_end"] - s["t_start"] for s in slow.spans(r, "compute")) for r in range(n)}
    waits = {r: sum(s.get("wait", 0) for s in slow.spans(r, "comm")) for r in range(n)}
    last = {}
    for s in slow.spans(0, "comm"):
        if "last" in s:
            last[s["last"]] = last.get(s["last"], 0) + 1
    slowest = min(waits, key=waits.get)
    n_coll = len(slow.spans(0, "comm"))
    fwd = [s for s in slow.spans(slowest, "compute", "forward") if s["unit"] > 0]
    f = max((s for s in fwd if slow.visible(mid(s))), key=lambda s: s["t_end"] - s["t_start"])
    marks.append(f"7:compute:{slowest}:{(f['t_start'] + f['t_end']) // 2}")
    others = [r for r in range(n) if r != slowest]
    victim = max(others, key=lambda r: waits[r])
    w = max((s for s in slow.spans(victim, "comm") if slow.visible(mid(s))),
            key=lambda s: s.get("wait", 0))
    marks.append(f"8:comm:{victim}:{(w['t_start'] + w['t_end']) // 2}")
    lines.append(
        f"7. **The slowest rank**, rank {slowest}: this run was started with `--slow-rank 3:2`, "
        f"so its forward and backward take twice as long (compute {ms(compute[slowest])} in step "
        f"{STEP} against {ms(min(compute[r] for r in others))} to "
        f"{ms(max(compute[r] for r in others))} on the others). It arrived last at "
        f"{T(last.get(slowest, 0))} of rank 0's {n_coll} collectives in the step and waited least "
        f"itself ({ms(waits[slowest])}).")
    lines.append(
        f"8. **What it costs the others**: a collective completes only when every rank has "
        f"arrived, so the others sit in it, their comm bars long and underlined red (exposed). "
        f"This one on rank {T(victim)} waited {ms(w.get('wait', 0))} for the last rank; rank "
        f"{T(victim)} waited {ms(waits[victim])} in all in step {STEP}. `shardlab summary "
        f"runs/tour-slow` prints each rank's wait per step as \"waiting for other ranks\", and "
        f"its verdict: \"{straggler_verdict(summary)}\" (the lead per step is printed as "
        f"step:+X ms: in that step the others waited X ms longer than it).")
    return marks, lines


def straggler_verdict(summary):
    """The verdict of `shardlab summary`'s straggler line, without its figures."""
    line = [l for l in summary.split("\n") if l.startswith("straggler:")]
    if not line:
        sys.exit("docs/viewer_tour.py: shardlab summary printed no straggler line")
    text = line[0].split(" (")[0].split(";")[0]  # "straggler: rank 3" or "straggler: none ..."
    return text


def make(cwd, build_dir="build"):
    """Runs everything in cwd (build/ linked there); writes docs/img/tour_*.png; returns the
    page's block."""
    for cmd in RUNS.values():
        sh(cmd, cwd)
    runs = {k: Run(os.path.join(cwd, "runs", f"tour-{k}")) for k in RUNS}
    marks_a, lines_a = scene_side_by_side(runs["dp"], runs["fsdp"])
    marks_b, lines_b = scene_slow_rank(runs["slow"],
                                       sh("build/bin/shardlab summary runs/tour-slow", cwd))
    shots = [("tour_side_by_side.png", "runs/tour-dp runs/tour-fsdp", marks_a),
             ("tour_slow_rank.png", "runs/tour-slow", marks_b)]
    for png, dirs, marks in shots:
        out = os.path.join(cwd, png)
        cmd = VIEWER.format(runs=dirs, png=out) + "".join(f" --mark {m}" for m in marks)
        sh(cmd, cwd)
        report = json.load(open(out[:-4] + ".json"))
        hidden = [m for m in report["marks"] if not m["shown"]]
        if hidden:
            sys.exit(f"docs/viewer_tour.py: marks outside their panel in {png}: {hidden}")
        regions, note = timed_regions(report)
        os.replace(out, picture("docs/img/" + png, regions, note))
    block = ["```"] + list(RUNS.values()) + [
        VIEWER.format(runs="runs/tour-dp runs/tour-fsdp", png="tour_side_by_side.png")
        + " --mark ...",
        VIEWER.format(runs="runs/tour-slow", png="tour_slow_rank.png") + " --mark ...",
        "```", "",
        "![DDP and FSDP side by side, step %d, callouts 1-6](img/tour_side_by_side.png)" % STEP, ""]
    block += lines_a + ["", "![One slow rank, step %d, callouts 7-8](img/tour_slow_rank.png)"
                        % STEP, ""] + lines_b
    block += ["", f"*Made by `make docs-figures` (docs/viewer_tour.py) with load average "
              f"{loadavg()} on 2 cores: the durations move from run to run; the structure "
              f"does not.*"]
    return "\n".join(block)
