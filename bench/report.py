#!/usr/bin/python3
"""Renders the benchmark report: markdown tables and PNG plots from Google Benchmark JSON.

    /usr/bin/python3 bench/report.py DATA_DIR OUT_DIR

DATA_DIR holds train_step*.json, collectives*.json, capacity*.json and wrap.json (any may be
missing; wrap.json's table and plot come from bench/wrap_report.py) and the
run.log that bench/run_bench.sh writes (machine, load average, exact commands), and, after
`make bench-peers`, peers_*.json and peers.log (bench/peers/run_peers.py). OUT_DIR gets report.md
and the plots. Needs matplotlib (Debian's python3-matplotlib, hence /usr/bin/python3).
"""
import json
import os
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1024.0 * 1024.0
STRATEGIES = ["no_shard", "shard_optim", "shard_grad_op", "full_shard", "hybrid_shard"]
COLORS = {"no_shard": "#1f77b4", "shard_optim": "#ff7f0e", "shard_grad_op": "#2ca02c",
          "full_shard": "#d62728", "hybrid_shard": "#9467bd"}
CATEGORIES = ["params", "params_unsharded", "grads", "grads_unsharded", "optimizer_state",
              "activations", "comm_buffers", "workspace"]
COLLECTIVES = ["all_gather", "reduce_scatter", "all_reduce", "broadcast"]
MAX_PNG_BYTES = 200 * 1024


# ---- loading ---------------------------------------------------------------------------------

def parse_name(name):
    """'train_step/local/full_shard/tiny/ranks:2/prefetch:1/manual_time' -> (fixed parts, args)."""
    fixed, args = [], {}
    for part in name.split("/"):
        if ":" in part:
            k, v = part.split(":", 1)
            try:
                args[k] = int(v)
            except ValueError:
                args[k] = v
        elif part not in ("manual_time", "real_time", "process_time"):
            fixed.append(part)
    return fixed, args


def load_rows(data_dir, suite):
    """Rows of DATA_DIR/<suite>*.json (e.g. train_step.json, train_step_mpi_np4.json): medians
    when a file has repetitions, else the runs; benchmarks that reported an error apart."""
    rows, errors, context = [], [], {}
    for name in sorted(os.listdir(data_dir)):
        if name.startswith(suite) and name.endswith(".json"):
            r, e, c = load_file(os.path.join(data_dir, name))
            rows += r
            errors += e
            context = context or c
    return rows, errors, context


def load_file(path):
    with open(path) as f:
        doc = json.load(f)
    rows, errors = [], []
    benches = doc.get("benchmarks", [])
    has_median = any(b.get("aggregate_name") == "median" for b in benches)
    for b in benches:
        if b.get("error_occurred"):
            errors.append((b["name"], b.get("error_message", "")))
            continue
        if has_median and b.get("aggregate_name") != "median":
            continue
        if not has_median and b.get("run_type", "iteration") != "iteration":
            continue
        fixed, args = parse_name(b.get("run_name", b["name"]))
        rows.append({"fixed": fixed, "args": args, "b": b})
    return rows, errors, doc.get("context", {})


def load_log(path):
    info = {"commands": [], "load_before": {}, "load_after": {}}
    if not os.path.exists(path):
        return info
    with open(path) as f:
        for line in f:
            key, _, rest = line.rstrip("\n").partition(" ")
            if key == "command":
                suite, _, cmd = rest.partition(" ")
                info["commands"].append((suite, cmd))
            elif key in ("load_before", "load_after"):
                suite, _, load = rest.partition(" ")
                info[key][suite] = load
            else:
                info[key] = rest
    return info


# ---- formatting --------------------------------------------------------------------------------

def mib(x):
    return "%.2f" % (x / MIB)


def fmt_size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            v = b / div
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.1f %s" % (v, unit))
    return "%d B" % b


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    size = os.path.getsize(path)
    if size > MAX_PNG_BYTES:
        print("report.py: warning: %s is %d KB (over 200 KB)" % (name, size // 1024),
              file=sys.stderr)
    return name


def log2_ranks_axis(ax, ranks):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(r) for r in ranks])
    ax.grid(True, which="major", alpha=0.3)


# ---- training step -----------------------------------------------------------------------------

def cpu_ms(b):
    """CPU time of the whole process per step (all ranks' threads), in milliseconds."""
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(b.get("time_unit", "ms"), 1.0)
    return b.get("cpu_time", 0.0) * scale


def tokens_per_cpu_s(b):
    """Tokens of all ranks per second of the process's CPU time."""
    cpu = cpu_ms(b)
    return b["tokens/s"] * b["step_ms"] / cpu if cpu > 0 else 0.0


def train_index(rows):
    """{(backend, preset): {(strategy, prefetch, ranks): benchmark dict}}"""
    idx = defaultdict(dict)
    for r in rows:
        f, a = r["fixed"], r["args"]
        if len(f) < 4 or f[0] != "train_step":
            continue
        backend, strategy, preset = f[1], f[2], f[3]
        idx[(backend, preset)][(strategy, a.get("prefetch", 1), a["ranks"])] = r["b"]
    return idx


def plot_train(idx, backend, preset, out_dir):
    data = idx[(backend, preset)]
    ranks = sorted({k[2] for k in data})
    files = []

    # Left: tokens per second of wall time. Right (local backend): per CPU-second of the whole
    # process, every rank's threads, which moves less when other processes share the cores. Under
    # MPI the process is one rank and MPI polls while it waits, so there is no such panel.
    local = backend == "local"
    if local:
        fig, (ax, ax_cpu) = plt.subplots(1, 2, figsize=(12, 4.6))
    else:
        fig, ax = plt.subplots(figsize=(7.5, 4.6))
        ax_cpu = None
    for s in STRATEGIES:
        for pf, style in ((1, "-"), (0, "--")):
            pts = [(n, data[(s, pf, n)]) for n in ranks if (s, pf, n) in data]
            if not pts:
                continue
            label = s + ("" if pf == 1 else " (prefetch off)")
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1]["tokens/s"] for p in pts], style, marker="o", ms=4,
                    color=COLORS[s], label=label)
            if ax_cpu:
                ax_cpu.plot(xs, [tokens_per_cpu_s(p[1]) for p in pts], style, marker="o", ms=4,
                            color=COLORS[s], label=label)
    panels = [(ax, "tokens/s (all ranks, wall time)")]
    if ax_cpu:
        panels.append((ax_cpu, "tokens per CPU-second (all threads)"))
        ax_cpu.set_title("Work per token, %s preset (%s backend)" % (preset, backend))
    for a, what in panels:
        log2_ranks_axis(a, ranks)
        a.set_ylim(bottom=0)
        a.set_xlabel("ranks N")
        a.set_ylabel(what)
    ax.set_title("Throughput, %s preset (%s backend)" % (preset, backend))
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.append(save(fig, out_dir, "train_tokens_%s_%s.png" % (backend, preset)))

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s in STRATEGIES:
        pts = [(n, data[(s, 1, n)]) for n in ranks if (s, 1, n) in data]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1]["peak"] / MIB for p in pts], "-", marker="o", ms=4,
                color=COLORS[s], label=s + " peak")
        ax.plot([p[0] for p in pts], [p[1]["formula"] / MIB for p in pts], ":", color=COLORS[s],
                label=s + " formula (persistent)")
    log2_ranks_axis(ax, ranks)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("ranks N")
    ax.set_ylabel("MiB per rank")
    ax.set_title("Peak memory per rank, %s preset (%s backend)" % (preset, backend))
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    files.append(save(fig, out_dir, "train_memory_%s_%s.png" % (backend, preset)))
    return files


def plot_breakdown(idx, backend, preset, n, out_dir):
    data = idx[(backend, preset)]
    present = [s for s in STRATEGIES if (s, 1, n) in data]
    if not present:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    bottom = [0.0] * len(present)
    cmap = plt.get_cmap("tab10")
    # Persistent categories at the bottom, so the formula line meets the top of their stack.
    stack = ["params", "grads", "optimizer_state", "params_unsharded", "grads_unsharded",
             "activations", "comm_buffers", "workspace"]
    for c in stack:
        i = CATEGORIES.index(c)
        vals = [data[(s, 1, n)].get("peak_" + c, 0.0) / MIB for s in present]
        if not any(vals):
            continue
        ax.bar(present, vals, bottom=bottom, color=cmap(i), label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, s in enumerate(present):
        ax.plot([i - 0.4, i + 0.4], [data[(s, 1, n)]["formula"] / MIB] * 2, "k:", lw=1.5)
    ax.plot([], [], "k:", label="formula (persistent)")
    ax.set_ylabel("MiB per rank at the peak")
    ax.set_title("What the peak holds at N = %d, %s preset (%s backend)" % (n, preset, backend))
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return save(fig, out_dir, "train_breakdown_%s_%s_n%d.png" % (backend, preset, n))


def train_sections(idx, out_dir):
    md = []
    order = {"tiny": 0, "small": 1, "medium": 2}
    for (backend, preset) in sorted(idx, key=lambda k: (k[0], order.get(k[1], 9))):
        data = idx[(backend, preset)]
        any_b = next(iter(data.values()))
        params = any_b.get("params", 0)
        md.append("### %s preset, %s backend (%.2fM parameters)\n"
                  % (preset, backend, params / 1e6))
        rows = []
        for s in STRATEGIES:
            for pf in (1, 0):
                for n in sorted({k[2] for k in data}):
                    b = data.get((s, pf, n))
                    if b is None:
                        continue
                    rows.append([s, pf, n, "%.1f" % b["step_ms"], "%.1f" % cpu_ms(b),
                                 "%.0f" % b["tokens/s"],
                                 mib(b["peak"]), mib(b["planned_peak"]), mib(b["persistent"]),
                                 mib(b["formula"]), mib(b["comm_bytes"]),
                                 mib(b["comm_buffer"]) if "comm_buffer" in b else "-",
                                 "%.0f%%" % (100 * b["comm_share"]),
                                 "%.0f%%" % (100 * b["exposed_share"])])
        md.append(table(["strategy", "prefetch", "N", "step ms", "CPU ms", "tokens/s", "peak MiB",
                         "planned peak MiB", "persistent MiB", "formula MiB",
                         "sent per rank MiB/step", "buffer MiB/step", "comm share", "exposed share"], rows))
        for f in plot_train(idx, backend, preset, out_dir):
            md.append("![%s](%s)\n" % (f, f))
    return "\n".join(md)


def headline_ratios(idx):
    rows = []
    for (backend, preset), data in sorted(idx.items()):
        for n in (2, 4):
            base = data.get(("no_shard", 1, n))
            if base is None:
                continue
            cells = [preset, backend, n, "%.0f" % base["tokens/s"]]
            for pf in (1, 0):
                fs = data.get(("full_shard", pf, n))
                cells.append("%.0f (%.2f)" % (fs["tokens/s"], fs["tokens/s"] / base["tokens/s"])
                             if fs else "-")
            for pf in (1, 0):  # local only: an MPI process is one rank, and MPI polls
                fs = data.get(("full_shard", pf, n))
                ok = fs and backend == "local" and tokens_per_cpu_s(base) > 0
                cells.append("%.2f" % (tokens_per_cpu_s(fs) / tokens_per_cpu_s(base))
                             if ok else "-")
            rows.append(cells)
    if not rows:
        return ""
    return table(["preset", "backend", "N", "no_shard tokens/s",
                  "full_shard prefetch on (ratio)", "full_shard prefetch off (ratio)",
                  "CPU ratio, prefetch on", "CPU ratio, prefetch off"], rows)


def memory_at(idx, n, out_dir):
    md = []
    for (backend, preset), data in sorted(idx.items()):
        rows = []
        for s in STRATEGIES:
            b = data.get((s, 1, n))
            if b is None:
                continue
            cat = lambda c: mib(b.get("peak_" + c, 0.0))  # noqa: E731
            rows.append([s, cat("params"), cat("grads"), cat("optimizer_state"),
                         mib(b["persistent"]), mib(b["formula"]), cat("params_unsharded"),
                         cat("grads_unsharded"), cat("activations"),
                         mib(b.get("peak_workspace", 0) + b.get("peak_comm_buffers", 0)),
                         mib(b["peak"]), mib(b["planned_peak"])])
        if not rows:
            continue
        md.append("#### %s preset, N = %d (%s backend)\n" % (preset, n, backend))
        md.append(table(["strategy", "params", "grads", "optim", "persistent", "formula",
                         "params unsharded", "grads unsharded", "activations",
                         "workspace + staging", "peak", "planned peak"], rows))
        f = plot_breakdown(idx, backend, preset, n, out_dir)
        if f:
            md.append("![%s](%s)\n" % (f, f))
    return "\n".join(md)


# ---- collectives -------------------------------------------------------------------------------

def bytes_bound(op, in_place, n):
    """The most busbw / memcpy a local collective can reach by the bytes each rank thread reads
    and writes, counting a read and a write alike (docs/collectives.md, "Local collectives against
    memory bandwidth"): memcpy of the size S reads S and writes S; an out-of-place all_gather
    does the same (its own block too), an in-place one (N-1)/N of it; a reduce_scatter reads S
    and writes S/N; an all_reduce reads S and writes S, as each rank thread's share of the
    pieces."""
    bus = 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1.0) / n
    traffic = {"all_gather": (n - 1.0) / n if in_place else 1.0,
               "reduce_scatter": (1.0 + 1.0 / n) / 2.0,
               "all_reduce": 1.0}[op]
    return bus / traffic


def collectives_section(rows, out_dir):
    busbw = defaultdict(dict)  # (op, backend, ranks) -> {bytes: busbw}
    # (op, backend, ranks) -> {bytes: (median, min, max)} of busbw over the memcpy that alternated
    # with it in the same run (bench_collectives --memcpy_rounds)
    paired = defaultdict(dict)
    memcpy = {}
    memcpy_ranks = {}  # (bytes, ranks) -> what each of N rank threads copies per second at once
    for r in rows:
        f, a, b = r["fixed"], r["args"], r["b"]
        if f == ["memcpy", "local"]:
            memcpy_ranks[(int(b["bytes"]), a["ranks"])] = b["bw"]
        elif f and f[0] == "memcpy":
            memcpy[a.get("threads", 1)] = b["bw"]
        elif len(f) >= 2 and f[0] in COLLECTIVES:
            busbw[(f[0], f[1], a["ranks"])][int(b["bytes"])] = b["busbw"]
            if "memcpy_frac" in b:
                paired[(f[0], f[1], a["ranks"])][int(b["bytes"])] = (
                    b["memcpy_frac"], b["memcpy_frac_min"], b["memcpy_frac_max"])
    if not busbw:
        return "", ""
    files = []
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey=True)
    styles = {2: "-o", 4: "-s", 8: "-^"}
    for ax, op in zip(axes.flat, COLLECTIVES):
        for (o, backend, n), pts in sorted(busbw.items()):
            if o != op:
                continue
            xs = sorted(pts)
            ax.plot(xs, [pts[x] / 1e9 for x in xs], styles.get(n, "-o"), ms=3,
                    label="%s, %d ranks" % (backend, n))
        for t, ls in sorted(memcpy.items()):
            ax.axhline(memcpy[t] / 1e9, ls=":" if t == 1 else "--", color="gray",
                       label="memcpy, %d thread%s" % (t, "" if t == 1 else "s"))
        ax.set_xscale("log", base=2)
        ticks = [1 << k for k in range(10, 29, 4)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_size(t) for t in ticks])
        ax.set_title(op)
        ax.set_xlabel("buffer size (nccl-tests 'size')")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Collective bus bandwidth vs size (busbw as nccl-tests define it)")
    fig.tight_layout()
    files.append(save(fig, out_dir, "collectives_busbw.png"))

    sizes = sorted({s for pts in busbw.values() for s in pts})
    keys = sorted(busbw)
    head = ["size"] + ["%s %s N=%d" % (o, bk, n) for (o, bk, n) in keys]
    trows = [[fmt_size(s)] + ["%.2f" % (busbw[k][s] / 1e9) if s in busbw[k] else "-" for k in keys]
             for s in sizes]
    md = ["busbw in GB/s (10^9 bytes per second).\n", table(head, trows)]
    if memcpy:
        md.append("memcpy of 256 MiB: " + ", ".join(
            "%.2f GB/s with %d thread%s" % (v / 1e9, t, "" if t == 1 else "s")
            for t, v in sorted(memcpy.items())) + ".\n")
    for f in files:
        md.append("![%s](%s)\n" % (f, f))

    ratio_sizes = [int(x * MIB) for x in (4, 16, 64, 256)]
    if paired:
        # Each collective against the memcpy that alternated with it, round by round.
        ratio_rows = []
        for (o, bk, n) in keys:
            if bk not in ("local", "local_in_place") or o == "broadcast":
                continue
            cells = [o, "in place" if bk == "local_in_place" else "out of place", n,
                     "%.2f" % bytes_bound(o, bk == "local_in_place", n)]
            for s in ratio_sizes:
                v = paired[(o, bk, n)].get(s)
                cells.append("%.2f (%.2f-%.2f)" % v if v else "-")
            ratio_rows.append(cells)
        md.append("Local busbw against memcpy by the same N rank threads, each copying the "
                  "collective's size at the same time, alternated with the collective in the "
                  "same run (`--memcpy_rounds`: the median round, lowest and highest in "
                  "parentheses). The bound is what the bytes each rank thread reads and writes "
                  "allow when a read and a write cost the same (docs/collectives.md, \"Local "
                  "collectives against memory bandwidth\"); from DRAM, writes cost more than "
                  "reads here and the reductions write with non-temporal stores, so a reduction "
                  "can pass its bound:\n")
        md.append(table(["collective", "form", "N", "bound", "4 MiB", "16 MiB", "64 MiB",
                         "256 MiB"], ratio_rows))
    elif memcpy_ranks:
        # The fair reference: the same N rank threads each copying the collective's size at once.
        ratio_rows = []
        for (o, bk, n) in keys:
            if bk not in ("local", "local_in_place") or o == "broadcast":
                continue
            cells = [o, "in place" if bk == "local_in_place" else "out of place", n]
            for s in ratio_sizes:
                m = memcpy_ranks.get((s, n))
                v = busbw[(o, bk, n)].get(s)
                cells.append("%.2f" % (v / m) if m and v else "-")
            ratio_rows.append(cells)
        md.append("Local busbw against memcpy by the same N rank threads, each copying the "
                  "collective's size at the same time (`memcpy/local`, docs/collectives.md):\n")
        md.append(table(["collective", "form", "N", "4 MiB", "16 MiB", "64 MiB", "256 MiB"],
                        ratio_rows))

    # The headline: busbw at 64 MiB against memcpy.
    hl = []
    target = 64 * 1024 * 1024
    for (o, bk, n) in keys:
        s = min(busbw[(o, bk, n)], key=lambda x: abs(x - target))
        if abs(s - target) > target // 4:
            continue
        v = busbw[(o, bk, n)][s]
        if s in paired.get((o, bk, n), {}):
            rel = " (%.2f x memcpy of %d threads, alternated)" % (paired[(o, bk, n)][s][0], n)
        elif bk in ("local", "local_in_place") and (s, n) in memcpy_ranks:
            rel = " (%.2f x memcpy of %d threads)" % (v / memcpy_ranks[(s, n)], n)
        elif 1 in memcpy:
            rel = " (%.2f x memcpy 1 thread)" % (v / memcpy[1])
        else:
            rel = ""
        hl.append([o, bk, n, fmt_size(s), "%.2f%s" % (v / 1e9, rel)])
    hl_md = table(["collective", "backend", "N", "size", "busbw GB/s"], hl) if hl else ""
    return "\n".join(md), hl_md


# ---- capacity ----------------------------------------------------------------------------------

def capacity_section(rows, out_dir):
    cap = {}
    limit = width = None
    for r in rows:
        f, a, b = r["fixed"], r["args"], r["b"]
        if len(f) < 2 or f[0] != "capacity":
            continue
        cap[(f[1], a["ranks"])] = b
        limit, width = a.get("limit_MiB"), a.get("width")
    if not cap:
        return "", ""
    ranks = sorted({k[1] for k in cap})
    head = ["strategy"] + ["N = %d" % n for n in ranks]
    trows, agree = [], True
    for s in STRATEGIES:
        cells = [s]
        for n in ranks:
            b = cap.get((s, n))
            if b is None:
                cells.append("-")
                continue
            cells.append("%d layers, %.2fM params" % (b["max_layers"], b["params"] / 1e6))
            agree = agree and b["max_layers"] == b["planned_layers"]
        trows.append(cells)
    md = ["Per-rank limit %s MiB, width C = %s, B x T = 1 x 32 per rank; a depth fits when the "
          "engine is built and takes two optimizer steps on every rank without OutOfMemory.\n"
          % (limit, width), table(head, trows),
          "The planner's answer %s the measured one in every cell.\n" %
          ("matches" if agree else "differs from (see planned_layers in the JSON)")]

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s in STRATEGIES:
        pts = [(n, cap[(s, n)]) for n in ranks if (s, n) in cap]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1]["params"] / 1e6 for p in pts], "-o", ms=4,
                color=COLORS[s], label=s)
        for n, b in pts:
            ax.annotate("L=%d" % b["max_layers"], (n, b["params"] / 1e6), fontsize=7,
                        textcoords="offset points", xytext=(3, 3), color=COLORS[s])
    log2_ranks_axis(ax, ranks)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("ranks N")
    ax.set_ylabel("largest trainable model (million parameters)")
    ax.set_title("Capacity under %s MiB per rank (width %s)" % (limit, width))
    ax.legend(fontsize=8)
    fig.tight_layout()
    f = save(fig, out_dir, "capacity.png")
    md.append("![%s](%s)\n" % (f, f))
    return "\n".join(md), table(head, trows)


# ---- wrap policies (bench_wrap; the table and plot of docs/fsdp.md, Wrap policy) ---------------

def wrap_section(data_dir, out_dir):
    """The wrap-policy sweep from DATA_DIR/wrap.json, through bench/wrap_report.py (the same table
    docs/fsdp.md splices in)."""
    path = os.path.join(data_dir, "wrap.json")
    if not os.path.exists(path):
        return ""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import wrap_report  # noqa: E402
    rows = wrap_report.rows_of(path)
    wrap_report.plot(rows, os.path.join(out_dir, "wrap_sweep.png"))
    reps = max(r["reps"] for r in rows)
    return ("full_shard on the local backend, prefetch 1: per model preset and `--wrap` policy, "
            "the units it makes, collective calls per step and rank, the largest "
            "`params_unsharded` a rank held, exposed communication and tokens/s (median of %d "
            "repetitions, min-max in parentheses). What the trade-off is: docs/fsdp.md, Wrap "
            "policy.\n\n" % reps + wrap_report.table(rows) +
            "\n![wrap_sweep.png](wrap_sweep.png)\n")


# ---- PyTorch beside ShardLab (bench/peers/) -----------------------------------------------------

PEER_NAMES = {"ddp": "DDP", "fsdp2": "FSDP2 (fully_shard per block + root)"}
IMPL_NAMES = {"torch_plain": "plain GPT-2", "torch_hf": "transformers GPT2LMHeadModel"}
# The targets of issue 19: ShardLab's tokens/s at least these multiples of the peer's, its peak
# RSS per rank at most RSS_TARGET of theirs.
SPEED_TARGETS = {"ddp": 1.25, "fsdp2": 2.0}
RSS_TARGET = 0.25


def peers_index(rows):
    """({(backend, strategy): row} of ShardLab, {(impl, strategy): row} of PyTorch, shape args)."""
    sl, peers, shape = {}, {}, {}
    for r in rows:
        f, a = r["fixed"], r["args"]
        if len(f) >= 4 and f[0] == "train_step":
            sl[(f[1], f[2])] = r["b"]
        elif len(f) >= 4 and f[0] == "peer":
            peers[(f[1], f[2])] = r["b"]
        else:
            continue
        shape = shape or {"preset": f[3], "ranks": a.get("ranks"), "batch": a.get("batch"),
                          "seq": a.get("seq")}
    return sl, peers, shape


def rss_per_rank(backend, b, n):
    """VmHWM per rank: a local process holds all N ranks (threads); MPI and PyTorch processes
    hold one each."""
    return b.get("rss_peak", 0.0) / (n if backend == "local" else 1)


def tokens_median(b, tokens_per_step):
    return tokens_per_step / (b["step_ms_median"] / 1e3) if b.get("step_ms_median") else 0.0


def peers_tables(rows):
    """(the section's markdown, a one-line headline), or ("", "") without peer rows."""
    sl, peers, shape = peers_index(rows)
    if not sl or not peers:
        return "", ""
    n = shape["ranks"] or 1
    tps = n * (shape["batch"] or 0) * (shape["seq"] or 0)
    head = ["system", "median step ms", "tokens/s", "CPU ms per step (all ranks)",
            "peak RSS per rank MiB", "tracked peak per rank MiB", "comm share / exposed",
            "first losses vs ShardLab"]
    out = []
    for (impl, st), b in sorted(peers.items()):
        out.append(["PyTorch %s, %s, gloo" % (PEER_NAMES.get(st, st), IMPL_NAMES.get(impl, impl)),
                    "%.1f" % b["step_ms_median"], "%.0f" % tokens_median(b, tps),
                    "%.1f" % cpu_ms(b), mib(rss_per_rank("torch", b, n)), "-", "-",
                    "%d steps, max diff %.1e" % (b.get("loss_checked_steps", 0),
                                                 b.get("loss_max_diff", 0))])
    for (backend, st), b in sorted(sl.items()):
        out.append(["ShardLab %s, %s" % (backend, st), "%.1f" % b["step_ms_median"],
                    "%.0f" % tokens_median(b, tps),
                    "%.1f" % cpu_ms(b) if backend == "local" else "-",
                    mib(rss_per_rank(backend, b, n)) + (" (process / %d)" % n
                                                        if backend == "local" else ""),
                    mib(b["peak"]),
                    "%.0f%% / %.0f%%" % (100 * b.get("comm_share", 0),
                                         100 * b.get("exposed_share", 0)), "-"])
    md = [table(head, out)]

    # Against the stronger peer of each strategy: the faster one for speed, the smaller for RSS.
    best_speed, best_rss = {}, {}
    for (impl, st), b in peers.items():
        if st not in best_speed or b["step_ms_median"] < best_speed[st][1]["step_ms_median"]:
            best_speed[st] = (impl, b)
        if st not in best_rss or b["rss_peak"] < best_rss[st][1]["rss_peak"]:
            best_rss[st] = (impl, b)
    strategies = [st for st in ("ddp", "fsdp2") if st in best_speed]
    rhead = ["ShardLab"]
    for st in strategies:
        rhead.append("tokens/s / %s's (target >= %.2f)" % (st.upper(), SPEED_TARGETS[st]))
    for st in strategies:
        rhead.append("RSS / %s's (target <= %.2f)" % (st.upper(), RSS_TARGET))
    rrows, headline = [], []
    for (backend, st), b in sorted(sl.items()):
        cells = ["%s %s" % (backend, st)]
        for p in strategies:
            r = tokens_median(b, tps) / tokens_median(best_speed[p][1], tps)
            cells.append("%.2f %s" % (r, "met" if r >= SPEED_TARGETS[p] else "NOT met"))
        for p in strategies:
            r = rss_per_rank(backend, b, n) / rss_per_rank("torch", best_rss[p][1], n)
            cells.append("%.2f %s" % (r, "met" if r <= RSS_TARGET else "NOT met"))
        rrows.append(cells)
        if (backend, st) in (("local", "full_shard"), ("mpi", "full_shard")):
            headline.append("%s full_shard %s" % (backend, ", ".join(cells[1:])))
    which = "; ".join("%s: speed against %s, RSS against %s" % (
        st.upper(), IMPL_NAMES.get(best_speed[st][0]), IMPL_NAMES.get(best_rss[st][0]))
        for st in strategies)
    md.append("Ratios against the stronger PyTorch model of each strategy (%s):\n" % which)
    md.append(table(rhead, rrows))
    hl = ("**PyTorch beside ShardLab** (%s, N = %d, %d x %d tokens per rank; ShardLab / PyTorch, "
          "targets: >= 1.25x DDP and >= 2x FSDP2 tokens/s, <= 0.25x their RSS per rank):\n\n"
          % (shape["preset"], n, shape["batch"], shape["seq"]) + table(rhead, rrows))
    return "\n".join(md), hl


def repetition_steps(path, prefix):
    """The median step (ms) of each repetition of the runs whose name starts with `prefix`, in
    the order they ran (the repetitions of run_peers.py are written in order)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        benches = json.load(f).get("benchmarks", [])
    return [b["step_ms_median"] for b in benches
            if b.get("run_type") != "aggregate" and not b.get("error_occurred")
            and b.get("run_name", b["name"]).startswith(prefix) and b.get("step_ms_median")]


def paired_fsdp2_ratios(data_dir):
    """Per repetition, FSDP2's median step over ShardLab local full_shard's: the two runs of one
    repetition are minutes apart, so a host whose speed drifts between repetitions moves both.
    Against the FSDP2 model with the shorter median step. (ratios, the peer's name) or ([], "")."""
    ours = repetition_steps(os.path.join(data_dir, "peers_shardlab.json"),
                            "train_step/local/full_shard/")
    best, theirs = "", []
    for impl in ("torch_plain", "torch_hf"):
        t = repetition_steps(os.path.join(data_dir, "peers_torch.json"), "peer/%s/fsdp2/" % impl)
        if t and (not theirs or statistics.median(t) < statistics.median(theirs)):
            best, theirs = impl, t
    if not ours or len(ours) != len(theirs):
        return [], ""
    return [p / o for o, p in zip(ours, theirs)], IMPL_NAMES.get(best, best)


def peers_section(rows, log, data_dir, out_dir):
    md, hl = peers_tables(rows)
    if not md:
        return "", ""
    ratios, peer = paired_fsdp2_ratios(data_dir)
    if len(ratios) > 1:
        md += ("\n\nThe FSDP2 ratio repetition by repetition (local full_shard against FSDP2, %s; "
               "each repetition runs both within minutes, so the host's drift between "
               "repetitions moves both): %s; their median %.2f.\n" % (
                   peer, ", ".join("%.2f" % r for r in ratios), statistics.median(ratios)))
    intro = (
        "`make bench-peers` (bench/peers/run_peers.py) trains the same GPT with PyTorch DDP and "
        "FSDP2 (%s) beside ShardLab's bench_train_step, and writes "
        "`data/peers_shardlab.json`, `data/peers_torch.json` and `data/peers.log`. Shape: %s. "
        "One BLAS / torch thread per rank; "
        "AdamW (lr 1e-3, betas 0.9 / 0.95, eps 1e-8, no weight decay), fp32, no clipping. "
        "PyTorch runs one process per rank on gloo. ShardLab's full_shard keeps its root gathered "
        "into the backward (`--keep_root=1`), as FSDP2 leaves its root unsharded after the "
        "forward: the same collectives on both sides. Step time: the median over the timed steps "
        "of the slowest rank's step, tokens/s = N x B x T / that median, for every row; each "
        "cell is the median of the repetitions. Peak RSS: VmHWM of /proc/self/status, the "
        "largest over a run's processes; ShardLab's local ranks are threads of one process, so "
        "its figure is the process's divided by N. Tracked peak: ShardLab's memory tracker (what "
        "its tensors hold). Comm share / exposed: ShardLab's time with a collective in flight and "
        "the part of it not under compute, as shares of the step. Every PyTorch run starts from the safetensors file ShardLab exported, "
        "reads the same batches and fails unless its first losses match a `shardlab train` run "
        "of the same strategy within 1e-4 (the last column).\n"
        % (log.get("versions", "?"), log.get("shape", "?")))
    loads = "; ".join("%s %s / %s" % (s, log["load_before"].get(s, "?"),
                                      log["load_after"].get(s, "?"))
                      for s, _ in log["commands"] if not s.startswith(("setup", "check")))
    run = ("- Date (UTC): %s; commit %s; %s, %s cores\n" % (
        log.get("date", "?"), log.get("git", "?"), log.get("machine_cpu", "?"),
        log.get("machine_cores", "?")) +
        ("- OpenBLAS kernels (ShardLab's): %s\n" % log["blas_core"]
         if log.get("blas_core") else "") +
        ("- Ranks bound to CPUs: %s\n" % log["bind"] if log.get("bind") else
         "- Ranks bound to CPUs: not recorded (PyTorch's processes were left to the scheduler "
         "before run_peers.py --bind)\n") +
        "- Load average (1, 5, 15 min) before / after each run: %s\n" % loads +
        "- Commands, in order:\n\n```\n" + "\n".join(c for _, c in log["commands"]) +
        "\n/usr/bin/python3 bench/report.py %s %s\n```\n" % (data_dir, out_dir))
    return "\n".join([intro, run, md]), hl


# ---- the report --------------------------------------------------------------------------------

def main():
    if len(sys.argv) != 3:
        print("usage: report.py DATA_DIR OUT_DIR", file=sys.stderr)
        return 2
    data_dir, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    log = load_log(os.path.join(data_dir, "run.log"))
    train_rows, train_err, train_ctx = load_rows(data_dir, "train_step")
    coll_rows, coll_err, _ = load_rows(data_dir, "collectives")
    cap_rows, cap_err, _ = load_rows(data_dir, "capacity")
    peer_rows, peer_err, _ = load_rows(data_dir, "peers")
    wrap_md = wrap_section(data_dir, out_dir)
    if not (train_rows or coll_rows or cap_rows or peer_rows or wrap_md):
        print("report.py: no benchmark results in %s" % data_dir, file=sys.stderr)
        return 1

    idx = train_index(train_rows)
    train_md = train_sections(idx, out_dir) if idx else ""
    ratios_md = headline_ratios(idx)
    mem_md = memory_at(idx, 4, out_dir)
    coll_md, coll_hl = collectives_section(coll_rows, out_dir)
    cap_md, cap_hl = capacity_section(cap_rows, out_dir)
    peers_md, peers_hl = peers_section(
        peer_rows, load_log(os.path.join(data_dir, "peers.log")), data_dir, out_dir)

    mem_kib = log.get("machine_mem_kib", "")
    mem_txt = "%.1f GiB" % (int(mem_kib) / 1024.0 / 1024.0) if mem_kib.isdigit() else "unknown"
    md = ["# ShardLab benchmarks: DP against FSDP on this machine\n",
          "Generated by `bench/report.py` from the JSON in `data/` (suite: %s). Regenerate with "
          "`make bench` (default suite, written to docs/bench/) or `make bench-quick`. What the "
          "counters mean and how to read them: docs/bench/README.md.\n" % log.get("mode", "?"),
          "## Machine and run\n",
          "- CPU: %s, %s cores; memory %s\n" % (log.get("machine_cpu", "unknown"),
                                                log.get("machine_cores", "?"), mem_txt) +
          ("- OpenBLAS kernels: %s\n" % log["blas_core"] if log.get("blas_core") else "") +
          "- Date (UTC): %s; commit %s\n" % (log.get("date", train_ctx.get("date", "?")),
                                             log.get("git", "?")) +
          "- Load average (1, 5, 15 min) before / after each suite: " + "; ".join(
              "%s %s / %s" % (s, log["load_before"].get(s, "?"), log["load_after"].get(s, "?"))
              for s, _ in log["commands"]) + ". The suites' own rank threads count in it (up "
          "to 8 on the cores), so the load before the first suite says whether other processes "
          "shared the host; where they did, times are inflated and noisy.\n" +
          "- Commands, in order:\n\n```\n" + "\n".join(c for _, c in log["commands"]) +
          "\n/usr/bin/python3 bench/report.py %s %s\n```\n" % (data_dir, out_dir)]

    md.append("## Headlines\n")
    if ratios_md:
        md.append("**full_shard against no_shard**: tokens/s of all ranks, the ratio to no_shard "
                  "in parentheses; the CPU ratios (local backend) compare tokens per CPU-second "
                  "of the process (the extra work of sharding, without the waiting), which other "
                  "processes on the cores disturb less:\n\n" + ratios_md)
    if mem_md:
        md.append("**Peak memory per rank at N = 4** (MiB) by category against docs/memory.md's formula "
                  "for persistent state (params + grads + optimizer):\n\n" + mem_md)
    if coll_hl:
        md.append("**Local-backend busbw at 64 MiB** against memcpy:\n\n" + coll_hl)
    if cap_hl:
        md.append("**Capacity** (deepest model that trains under the per-rank limit):\n\n" + cap_hl)
    if peers_hl:
        md.append(peers_hl)

    if train_md:
        md.append("## Training step\n\nWeak scaling: each rank trains its own B x T tokens per "
                  "step; tokens/s counts all ranks. Ranks are threads sharing the machine's "
                  "cores, so beyond the core count more ranks add work, not compute.\n\n"
                  + train_md)
    if coll_md:
        md.append("## Collectives\n\n" + coll_md)
    if cap_md:
        md.append("## Capacity\n\n" + cap_md)
    if wrap_md:
        md.append("## Wrap policy\n\n" + wrap_md)
    if peers_md:
        md.append("## PyTorch beside ShardLab\n\n" + peers_md)
    errors = train_err + coll_err + cap_err + peer_err
    if errors:
        md.append("## Skipped or failed benchmarks\n\n" + table(
            ["benchmark", "message"], [[n, m.replace("|", "/")] for n, m in errors]))

    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(md))
    print("report.py: wrote %s" % os.path.join(out_dir, "report.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
