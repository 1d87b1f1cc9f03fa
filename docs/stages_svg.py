#!/usr/bin/env python3
"""Draws docs/img/stages.svg, the second picture of docs/design.md: model -> stages -> units ->
engine, for GPT-2's `tiny` preset under four wrap policies.

The stages and the units each policy makes are not written here: the script runs
`shardlab train --model tiny --steps 1` once per policy and reads the run's meta.json: the
model's stages in forward order ("model"."stages") and the units with the stages each holds
("units", core/train/train_output.cpp, from the engine's own wrap plan). So the picture is what
the engine does.

    python3 docs/stages_svg.py [--shardlab build/bin/shardlab] [OUT.svg]   (make docs-figures)
    python3 docs/stages_svg.py --check [--shardlab BIN]   (the test docs.stages_svg: it is current)
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# GPT-2 tiny (C 64): a block's attention half holds 16,768 parameters, its MLP half 33,216, so
# size:20000 wraps the MLP halves and leaves the attention halves in the root.
POLICIES = ["block", "layer", "blocks:2", "size:20000"]
COLORS = ["#f4d6a0", "#b9d7f0", "#c7e6c1", "#e6c6e8", "#f0c0c0", "#d0d0f4", "#f6e7a8"]


def units_of(shardlab, wrap):
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        subprocess.run([shardlab, "train", "--model", "tiny", "--steps", "1", "--batch", "1",
                        "--seq", "8", "--wrap", wrap, "--run-dir", str(run)],
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        meta = json.loads((run / "meta.json").read_text())
        return meta["model"]["stages"], meta["units"]


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def draw(stages, plans):
    row_h, top, left = 30, 78, 20
    stage_w, col_w, gap = 150, 118, 16
    engine_x = left + stage_w + gap + len(POLICIES) * (col_w + gap) + 14
    width, height = engine_x + 300, top + len(stages) * row_h + 150
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
           '</defs>']
    text = lambda x, y, s, **kw: out.append(  # noqa: E731
        f'<text x="{x}" y="{y}"' + "".join(f' {k.replace("_", "-")}="{v}"' for k, v in kw.items())
        + f">{esc(s)}</text>")
    text(left, 22, "model (GPT-2 tiny)", font_weight="bold")
    text(left, 38, "an ordered list of stages")
    x0 = left + stage_w + gap
    text(x0, 22, "units: the wrap policy groups stages (--wrap)", font_weight="bold")
    text(engine_x, 22, "engine (core/fsdp)", font_weight="bold")
    for i, s in enumerate(stages):
        y = top + i * row_h
        out.append(f'<rect x="{left}" y="{y}" width="{stage_w - 8}" height="{row_h - 6}" rx="4" '
                   'fill="#eef2f7" stroke="#335"/>')
        text(left + 8, y + 17, s)
    for c, wrap in enumerate(POLICIES):
        x = x0 + c * (col_w + gap)
        text(x + col_w / 2, top - 12, f"--wrap {wrap}", text_anchor="middle", font_weight="bold")
        unit_of = {s: k for k, u in enumerate(plans[wrap]) for s in u["stages"]}
        for i, s in enumerate(stages):
            k, y = unit_of[s], top + i * row_h
            out.append(f'<rect x="{x}" y="{y}" width="{col_w}" height="{row_h - 6}" rx="4" '
                       f'fill="{COLORS[k % len(COLORS)]}" stroke="#335"/>')
            text(x + col_w / 2, y + 17, f"unit {k}", text_anchor="middle")
        names = [f"{k}: {u['name']}" for k, u in enumerate(plans[wrap])]
        for j, n in enumerate(names):
            text(x, top + len(stages) * row_h + 14 + j * 14, n, font_size="10")
    lines = ["forward: stages first to last;",
             "  a unit is all-gathered before",
             "  its first use, freed after its last",
             "backward: the stages in reverse;",
             "  a unit's gradient is reduced",
             "  (reduce-scatter) after its last use",
             "act-ckpt: a layer's stages run",
             "  forward again before its backward",
             "never a layer's name: only stages,",
             "  their parameters, forward, backward"]
    for j, s in enumerate(lines):
        text(engine_x, top + 10 + j * 18, s)
    ay = top + len(stages) * row_h / 2
    out.append(f'<line x1="{engine_x - 30}" y1="{ay}" x2="{engine_x - 6}" y2="{ay}" '
               'stroke="#555" stroke-width="1.4" marker-end="url(#a)"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    shardlab = str(ROOT / "build/bin/shardlab")
    if "--shardlab" in args:
        i = args.index("--shardlab")
        shardlab = args[i + 1]
        del args[i:i + 2]
    out = Path(args[0]) if args else ROOT / "docs/img/stages.svg"
    runs = {w: units_of(shardlab, w) for w in POLICIES}
    svg = draw(runs["block"][0], {w: units for w, (_, units) in runs.items()})
    if check:
        if not out.exists() or out.read_text() != svg:
            sys.exit(f"{out} is not the picture of the engine's wrap plans: "
                     "run python3 docs/stages_svg.py")
        print(f"{out}: current")
        return
    out.write_text(svg)
    print(f"{out}: {len(POLICIES)} wrap policies")


if __name__ == "__main__":
    main()
