#!/usr/bin/python3
"""Draws the figures of docs/lessons/ (run with /usr/bin/python3, which has matplotlib).

For each lesson: what every rank keeps of the model's flat state (parameters, gradients, Adam m
and v), and which collectives one step runs. Plus the unit schedule of one sharded step (lesson 2).
Usage: draw_figures.py OUT_DIR   (make lesson-figures writes docs/lessons/img/)
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

COLORS = {"params": "#4C72B0", "grads": "#DD8452", "adam": "#55A868"}
ROWS = [("params", "parameters (4 B)"), ("grads", "gradients (4 B)"), ("adam", "Adam m, v (8 B)")]

# Per lesson: for each row, "full" (whole buffer kept and used), "shard" (only this rank's 1/k),
# "held" (whole buffer kept, only this rank's slice used).
LESSONS = {
    1: dict(title="Lesson 1: data parallel: every rank keeps everything",
            rows={"params": "full", "grads": "full", "adam": "full"}, group=4,
            bytes="16Ψ per rank", comm=["all-reduce of gradients: 2·4Ψ(N-1)/N bytes per rank"]),
    2: dict(title="Lesson 2: sharded parameters, gathered per unit while it computes",
            rows={"params": "shard", "grads": "held", "adam": "held"}, group=4,
            bytes="12Ψ + 4Ψ/N per rank",
            comm=["all-gather of each unit, forward and backward: 2·4Ψ(N-1)/N",
                  "all-reduce of gradients: 2·4Ψ(N-1)/N"]),
    3: dict(title="Lesson 3: sharded gradients: reduce-scatter instead of all-reduce",
            rows={"params": "shard", "grads": "shard", "adam": "held"}, group=4,
            bytes="8Ψ + 8Ψ/N per rank",
            comm=["all-gather of each unit, forward and backward: 2·4Ψ(N-1)/N",
                  "reduce-scatter of each unit's gradient: 4Ψ(N-1)/N"]),
    4: dict(title="Lesson 4: sharded optimizer state: full FSDP (ZeRO-3)",
            rows={"params": "shard", "grads": "shard", "adam": "shard"}, group=4,
            bytes="16Ψ/N per rank",
            comm=["all-gather of each unit, forward and backward: 2·4Ψ(N-1)/N",
                  "reduce-scatter of each unit's gradient: 4Ψ(N-1)/N"]),
    5: dict(title="Lesson 5: hybrid: shard inside groups of G = 2, replicate across groups",
            rows={"params": "shard", "grads": "shard", "adam": "shard"}, group=2,
            bytes="16Ψ/G per rank",
            comm=["in group: all-gather 2·4Ψ(G-1)/G, reduce-scatter 4Ψ(G-1)/G",
                  "across groups: all-reduce of gradient shards 2·4(Ψ/G)(R-1)/R"]),
}
NAMES = {1: "01_data_parallel", 2: "02_sharded_params", 3: "03_sharded_grads",
         4: "04_sharded_optimizer", 5: "05_hybrid"}


def draw_strip(ax, x, y, w, h, mode, shard, k, color):
    """One flat buffer of width w cut into k shards; `shard` is this rank's."""
    seg = w / k
    for s in range(k):
        mine = s == shard
        if mode == "full" or (mode == "held" and mine) or (mode == "shard" and mine):
            ax.add_patch(Rectangle((x + s * seg, y), seg, h, facecolor=color, edgecolor="white", lw=1))
        elif mode == "held":
            ax.add_patch(Rectangle((x + s * seg, y), seg, h, facecolor="white", edgecolor=color,
                                   hatch="///", lw=1))
        else:
            ax.add_patch(Rectangle((x + s * seg, y), seg, h, facecolor="#F2F2F2", edgecolor="#CCCCCC",
                                   lw=0.8))


def lesson_figure(n, spec, out):
    ranks = 4
    k = spec["group"]
    fig, ax = plt.subplots(figsize=(10, 4.4), dpi=100)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.4)
    ax.axis("off")
    ax.text(0.1, 4.15, spec["title"], fontsize=12.5, weight="bold")
    w, h, x0, gap = 2.0, 0.32, 1.45, 0.15
    for r in range(ranks):
        x = x0 + r * (w + gap)
        ax.text(x + w / 2, 3.65, f"rank {r}", ha="center", fontsize=10.5)
        for i, (key, _) in enumerate(ROWS):
            y = 3.1 - i * 0.5
            draw_strip(ax, x, y, w, h, spec["rows"][key], r % k, k, COLORS[key])
    for i, (key, label) in enumerate(ROWS):
        ax.text(x0 - 0.08, 3.1 - i * 0.5 + h / 2, label, ha="right", va="center", fontsize=9)
    if n == 5:  # the two groups of the mesh
        for g in range(2):
            x = x0 + g * 2 * (w + gap) - 0.06
            ax.add_patch(Rectangle((x, 2.0), 2 * w + gap + 0.12, 1.95, fill=False, ls="--",
                                   edgecolor="#888888", lw=1.2))
            ax.text(x + w + gap / 2 + 0.06, 1.82, f"group {g} (shards 0, 1)", ha="center",
                    fontsize=9, color="#555555")
        for s in range(2):  # replicas of shard s, one per group
            xa = x0 + s * (w + gap) + w / 2
            xb = x0 + (2 + s) * (w + gap) + w / 2
            ax.add_patch(FancyArrowPatch((xa, 1.62 - 0.12 * s), (xb, 1.62 - 0.12 * s),
                                         arrowstyle="<->", mutation_scale=10, color="#C44E52",
                                         connectionstyle="arc3,rad=0.0"))
        ax.text(5.0, 1.3, "replicas of the same shard: all-reduce across groups", ha="center",
                fontsize=9, color="#C44E52")
    # Legend of the strip styles.
    lx, ly = 1.45, 0.95 if n != 5 else 0.85
    ax.add_patch(Rectangle((lx, ly), 0.3, 0.18, facecolor="#777777"))
    ax.text(lx + 0.38, ly + 0.09, "kept and used", va="center", fontsize=9)
    ax.add_patch(Rectangle((lx + 1.7, ly), 0.3, 0.18, facecolor="white", edgecolor="#777777",
                           hatch="///"))
    ax.text(lx + 2.08, ly + 0.09, "kept, not used by this rank's update", va="center", fontsize=9)
    ax.add_patch(Rectangle((lx + 5.1, ly), 0.3, 0.18, facecolor="#F2F2F2", edgecolor="#CCCCCC"))
    ax.text(lx + 5.48, ly + 0.09, "not kept (another rank's shard)", va="center", fontsize=9)
    ax.text(0.1, 0.55 if n != 5 else 0.5, "memory: " + spec["bytes"], fontsize=10.5, weight="bold")
    for i, c in enumerate(spec["comm"]):
        ax.text(3.75, 0.55 - i * 0.3 if n != 5 else 0.5 - i * 0.28, "per step: " + c, fontsize=9.5)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def schedule_figure(out):
    """Lesson 2's step for the root unit and two blocks: gather, compute, free; then backward."""
    fig, ax = plt.subplots(figsize=(10, 2.9), dpi=100)
    ax.axis("off")
    ax.set_xlim(0, 10.2)
    ax.set_ylim(0, 2.9)
    ax.text(0.05, 2.65, "One sharded step: each unit is gathered just before it computes and freed "
            "right after", fontsize=11.5, weight="bold")
    steps = [("root", "embed", "F"), ("block 0", "fwd", "F"), ("block 1", "fwd", "F"),
             ("root", "head fwd+bwd", "FB"), ("block 1", "bwd", "B"), ("block 0", "bwd", "B"),
             ("—", "embed bwd\n(no params)", "B")]
    lanes = {"root": 1.9, "block 0": 1.45, "block 1": 1.0, "—": 1.9}
    for name, y in [("root", 1.9), ("block 0", 1.45), ("block 1", 1.0)]:
        ax.text(0.05, y + 0.12, name, fontsize=9.5, va="center")
    x = 0.9
    for unit, what, phase in steps:
        y = lanes[unit]
        width = 1.75 if phase == "FB" else 1.2
        if unit != "—":
            ax.add_patch(Rectangle((x, y), 0.28, 0.26, facecolor="#8172B3"))
            inner = width - 0.6
            if phase == "FB":  # the head's backward follows its forward at once
                ax.add_patch(Rectangle((x + 0.3, y), inner / 2, 0.26, facecolor="#4C72B0"))
                ax.add_patch(Rectangle((x + 0.3 + inner / 2, y), inner / 2, 0.26,
                                       facecolor="#DD8452"))
            else:
                ax.add_patch(Rectangle((x + 0.3, y), inner, 0.26,
                                       facecolor="#4C72B0" if phase == "F" else "#DD8452"))
            ax.add_patch(Rectangle((x + width - 0.28, y), 0.28, 0.26, facecolor="#BBBBBB"))
        else:
            ax.add_patch(Rectangle((x + 0.3, y), width - 0.6, 0.26, facecolor="#DD8452"))
        ax.text(x + width / 2, y - 0.04, what, ha="center", va="top", fontsize=8.5)
        x += width + 0.08
    for lx, c, label in [(0.9, "#8172B3", "all-gather (allocates params_unsharded)"),
                         (4.5, "#4C72B0", "forward"), (5.9, "#DD8452", "backward"),
                         (7.4, "#BBBBBB", "free the gathered copy")]:
        ax.add_patch(Rectangle((lx, 0.2), 0.25, 0.18, facecolor=c))
        ax.text(lx + 0.32, 0.29, label, va="center", fontsize=8.5)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/lessons/img"
    os.makedirs(out, exist_ok=True)
    for n, spec in LESSONS.items():
        lesson_figure(n, spec, os.path.join(out, NAMES[n] + ".png"))
    schedule_figure(os.path.join(out, "02_schedule.png"))
    for f in sorted(os.listdir(out)):
        print(f"{os.path.join(out, f)}: {os.path.getsize(os.path.join(out, f)) // 1024} KB")


if __name__ == "__main__":
    main()
