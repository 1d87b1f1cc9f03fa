"""The simulations behind docs/choosing.md ("How to choose a strategy").

`make docs-figures` runs it (figures `choosing-bandwidth`, `choosing-memory`, `choosing-7b`);
alone, with the page rewritten:

    python3 docs/figures.py choosing-bandwidth choosing-memory choosing-7b

Every number comes from `shardlab simulate` or `shardlab plan --recommend`: virtual times, the
same on any machine whatever its load. The plots need matplotlib (Debian's python3-matplotlib,
hence /usr/bin/python3 when the python3 running this has none)."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figlib import NUM, fenced, mark_timing, picture, run  # noqa: E402  (shared by all figure makers)

# (a) gpt2-xl on 64 H100s (8 nodes), one 1024-token sequence per rank, bf16: the inter-node link
# per GPU from 12.5 to 400 Gb/s (the h100-sxm preset's), everything else the preset's.
BW_GBITS = [12.5, 25, 50, 100, 200, 400]
BW_RUN = ("build/bin/shardlab simulate --cluster {cluster} --model gpt2-xl --ranks 64 --batch 64 "
          "--seq 1024 --param-dtype bf16 --reduce-dtype bf16 --trace off --strategy {strategy}")
BW_STRATEGIES = [("no_shard", "no_shard"), ("full_shard", "full_shard"),
                 ("hybrid_shard G=8", "hybrid_shard --hybrid-group 8")]

# (b) llama2-7b, one 2048-token sequence per rank, bf16, flash attention, act-ckpt: the peak per
# rank against N.
MEM_RANKS = [8, 16, 32, 64, 128, 256, 512]
MEM_RUN = ("build/bin/shardlab simulate --cluster h100-sxm --model llama2-7b --ranks {n} "
           "--batch {n} --seq 2048 --param-dtype bf16 --reduce-dtype bf16 --attention flash "
           "--act-ckpt --trace off --strategy {strategy}")
MEM_STRATEGIES = [("no_shard", "no_shard"), ("shard_optim", "shard_optim"),
                  ("shard_grad_op", "shard_grad_op"), ("full_shard", "full_shard"),
                  ("hybrid_shard G=8", "hybrid_shard --hybrid-group 8")]

# (c) the worked example.
RECOMMEND = ("build/bin/shardlab plan --recommend --cluster h100-sxm --model llama2-7b --ranks 64 "
             "--global-batch 256 --seq 2048 --attention flash")


def get(pattern, out, cmd):
    m = re.search(pattern, out)
    if not m:
        sys.exit(f"docs/choosing.py: `{cmd}` printed nothing matching {pattern!r}")
    return m.group(1)


def gib(text):
    value, unit = text.split()
    return float(value) * {"KiB": 2 ** -20, "MiB": 2 ** -10, "GiB": 1.0}[unit]


def plot(kind, data, png):
    """Draws figure `kind` from `data` into `png`, with this interpreter's matplotlib or
    /usr/bin/python3's."""
    try:
        import matplotlib
    except ImportError:
        blob = json.dumps(data)
        subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--plot", kind, png],
                       input=blob, text=True, check=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if kind == "bandwidth":
        for name, ys in data["series"].items():
            ax.plot(data["x"], [y / 1e3 for y in ys], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(data["x"])
        ax.set_xticklabels([f"{x:g}" for x in data["x"]])
        ax.set_xlabel("inter-node bandwidth per GPU (Gb/s, one direction)")
        ax.set_ylabel("predicted tokens/s (thousands, all 64 ranks)")
        ax.set_title("gpt2-xl, 64 ranks of h100-sxm (8 nodes), batch 64 x 1024, bf16", fontsize=10)
    else:
        for name, ys in data["series"].items():
            xs = [x for x, y in zip(data["x"], ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], marker="o", label=name)
        ax.axhline(data["cap"], color="grey", linestyle="--", linewidth=1)
        ax.text(data["x"][0], data["cap"] * 1.04, f"H100 memory, {data['cap']:g} GiB",
                fontsize=8, color="grey")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(data["x"])
        ax.set_xticklabels([str(x) for x in data["x"]])
        ax.set_xlabel("ranks N")
        ax.set_ylabel("peak memory per rank (GiB)")
        ax.set_title("llama2-7b, one 2048-token sequence per rank, bf16, flash, act-ckpt, h100-sxm",
                     fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=80)


def bandwidth(cwd):
    preset = json.loads(run("build/bin/shardlab simulate --print-cluster h100-sxm", cwd))
    series = {name: [] for name, _ in BW_STRATEGIES}
    for g in BW_GBITS:
        spec = dict(preset, name=f"h100-ib{g:g}")
        spec["inter_node"] = dict(preset["inter_node"], bandwidth_GBps=g / 8)
        path = f"ib{g:g}.json"
        with open(os.path.join(cwd, path), "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=2)
        for name, flag in BW_STRATEGIES:
            cmd = BW_RUN.format(cluster=path, strategy=flag)
            series[name].append(int(get(r"tokens/s +([0-9]+)", run(cmd, cwd), cmd)))
    plot("bandwidth", {"x": BW_GBITS, "series": series}, picture("docs/img/choosing_bandwidth.png"))

    rows = ["| inter-node Gb/s per GPU | " + " | ".join(n for n, _ in BW_STRATEGIES) + " |",
            "| ---: |" + " ---: |" * len(BW_STRATEGIES)]
    for i, g in enumerate(BW_GBITS):
        rows.append(f"| {g:g} | " + " | ".join(f"{series[n][i]:,}" for n, _ in BW_STRATEGIES)
                    + " |")
    full, hybrid = series["full_shard"], series["hybrid_shard G=8"]
    ahead = [g for g, f, h in zip(BW_GBITS, full, hybrid) if h > f]
    if ahead and ahead[-1] != BW_GBITS[-1]:
        last = BW_GBITS.index(ahead[-1])
        sentence = (f"On this model and cluster, hybrid_shard (G = 8) is faster than full_shard "
                    f"up to {ahead[-1]:g} Gb/s per GPU between nodes ({hybrid[last]:,} against "
                    f"{full[last]:,} tokens/s) and slower from {BW_GBITS[last + 1]:g} Gb/s on "
                    f"({hybrid[last + 1]:,} against {full[last + 1]:,}).")
    elif ahead:
        sentence = "On this model and cluster, hybrid_shard (G = 8) is faster than full_shard at every bandwidth plotted."
    else:
        sentence = ("On this model and cluster, full_shard is faster than hybrid_shard (G = 8) at "
                    "every bandwidth plotted.")
    return ("![tokens/s against inter-node bandwidth](img/choosing_bandwidth.png)\n\n"
            + "\n".join(rows) + "\n\n" + sentence)


def memory(cwd):
    series = {name: [] for name, _ in MEM_STRATEGIES}
    cap = None
    for n in MEM_RANKS:
        for name, flag in MEM_STRATEGIES:
            if name.startswith("hybrid") and n <= 8:
                series[name].append(None)  # G = 8 = N: full_shard itself
                continue
            cmd = MEM_RUN.format(n=n, strategy=flag)
            out = run(cmd, cwd)
            series[name].append(gib(get(r"peak memory +([0-9.]+ [KMG]iB)", out, cmd)))
            cap = gib(get(r"peak memory .* per rank, of ([0-9.]+ [KMG]iB)", out, cmd))
    plot("memory", {"x": MEM_RANKS, "series": series, "cap": cap},
         picture("docs/img/choosing_memory.png"))
    rows = ["| N | " + " | ".join(n for n, _ in MEM_STRATEGIES) + " |",
            "| ---: |" + " ---: |" * len(MEM_STRATEGIES)]
    for i, n in enumerate(MEM_RANKS):
        cells = ["-" if series[s][i] is None else f"{series[s][i]:.2f}" for s, _ in MEM_STRATEGIES]
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    return ("![peak memory per rank against N](img/choosing_memory.png)\n\n"
            "Peak GiB per rank:\n\n" + "\n".join(rows))


def recommend(cwd):
    out = run(RECOMMEND, cwd)
    # The progress lines go to stderr, which run() merges: not part of the report.
    out = "\n".join(l for l in out.split("\n")
                    if not re.match(r"recommend: \d+ of \d+ configurations", l))
    out = out.replace(" (the GPU's memory)\n\n", " (the GPU's memory)\n")
    cmd = RECOMMEND.replace("build/bin/", "").replace("--ranks 64 ", "--ranks 64 \\\n    ")
    # The search's own duration is the one timing figure of a simulated answer.
    return mark_timing(fenced(cmd.split("\n") + out.rstrip("\n").split("\n")),
                       [r"configurations in (" + NUM + " s)"])


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--plot":  # plot(): run by /usr/bin/python3
        plot(sys.argv[2], json.loads(sys.stdin.read()), sys.argv[3])
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
