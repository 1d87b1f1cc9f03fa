"""The wrap-policy sweep's table and plot, from bench_wrap's Google Benchmark JSON.

    /usr/bin/python3 bench/wrap_report.py JSON TABLE.md PLOT.png

JSON is `build/bin/bench_wrap --benchmark_repetitions=R --benchmark_out=JSON
--benchmark_out_format=json` (with or without --benchmark_report_aggregates_only): every row of
the table is one preset x wrap policy, with the median over the repetitions of each timing and
their range (min-max). Memory and collective counts are the same in every repetition. The table is
markdown (docs/fsdp.md splices it with tests/corpus/splice_table.py); the plot has one row per
preset and one panel per measure.
"""
import json
import statistics
import sys


def rows_of(path):
    data = json.load(open(path, encoding="utf-8"))
    runs = {}
    order = []
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        # wrap/local/full_shard/<preset>/<wrap>/ranks:N/...
        parts = b["run_name"].split("/")
        key = (parts[3], parts[4], parts[5])
        if key not in runs:
            runs[key] = []
            order.append(key)
        runs[key].append(b)
    if not order:
        sys.exit(f"{path}: no bench_wrap iterations (was it run with --benchmark_report_aggregates_only?)")
    # Presets small to large, policies in bench_wrap's default order (others after, as run).
    presets = ["tiny", "small", "medium"]
    wraps = ["block", "whole", "layer", "blocks:2", "size:300000", "size:1000000"]
    rank = lambda lst, x: lst.index(x) if x in lst else len(lst)
    order.sort(key=lambda k: (rank(presets, k[0]), rank(wraps, k[1])))
    out = []
    for key in order:
        reps = runs[key]
        med = lambda name: statistics.median(r[name] for r in reps)
        span = lambda name: (min(r[name] for r in reps), max(r[name] for r in reps))
        out.append({
            "preset": key[0], "wrap": key[1], "ranks": key[2].split(":")[1], "reps": len(reps),
            "units": int(reps[0]["units"]), "largest": reps[0]["largest_unit"],
            "collectives": reps[0]["collectives"],
            "pu_mib": reps[0]["peak_params_unsharded"] / 2**20, "peak_mib": reps[0]["peak"] / 2**20,
            "exposed": med("exposed_ms"), "exposed_span": span("exposed_ms"),
            "step": med("step_ms"), "tokens": med("tokens/s"), "tokens_span": span("tokens/s"),
        })
    return out


def table(rows):
    lines = [
        "| preset | wrap | units | largest unit (params) | collectives / step / rank | peak params_unsharded MiB | peak MiB | exposed comm ms / step (min-max) | step ms | tokens/s (min-max) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} | `{r['wrap']}` | {r['units']} | {r['largest'] / 1e6:.2f}M | "
            f"{r['collectives']:.0f} | {r['pu_mib']:.1f} | {r['peak_mib']:.1f} | "
            f"{r['exposed']:.0f} ({r['exposed_span'][0]:.0f}-{r['exposed_span'][1]:.0f}) | "
            f"{r['step']:.0f} | {r['tokens']:.0f} ({r['tokens_span'][0]:.0f}-{r['tokens_span'][1]:.0f}) |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = list(dict.fromkeys(r["preset"] for r in rows))
    measures = [("collectives", "collectives / step / rank", None),
                ("pu_mib", "peak params_unsharded (MiB)", None),
                ("exposed", "exposed comm (ms / step)", "exposed_span"),
                ("tokens", "tokens/s (all ranks)", "tokens_span")]
    fig, axes = plt.subplots(len(presets), len(measures), figsize=(13, 3.2 * len(presets)),
                             squeeze=False)
    for i, p in enumerate(presets):
        rs = [r for r in rows if r["preset"] == p]
        names = [r["wrap"] for r in rs]
        for j, (key, label, span) in enumerate(measures):
            ax = axes[i][j]
            vals = [r[key] for r in rs]
            err = None
            if span:
                err = [[v - r[span][0] for v, r in zip(vals, rs)],
                       [r[span][1] - v for v, r in zip(vals, rs)]]
            ax.bar(range(len(rs)), vals, yerr=err, color="#4C72B0", capsize=3)
            ax.set_xticks(range(len(rs)))
            ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
            ax.set_title(f"{p}, N = {rs[0]['ranks']}: {label}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    fig.suptitle("full_shard, local backend: what the wrap policy changes (median, bars: min-max)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    rows = rows_of(sys.argv[1])
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(table(rows))
    plot(rows, sys.argv[3])
    print(f"{sys.argv[2]}: {len(rows)} rows; {sys.argv[3]}")


if __name__ == "__main__":
    main()
