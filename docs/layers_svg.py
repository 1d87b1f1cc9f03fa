#!/usr/bin/env python3
"""Draws docs/img/layers.svg, the picture of docs/design.md, from the build's own layer table.

The layers and what each links are read from the shardlab_layer(...) calls in core/CMakeLists.txt
and the shardlab_commands target in apps/shardlab/CMakeLists.txt, so the picture is the table the
build enforces. Each layer sits one row above the highest layer it uses; an arrow means "uses",
drawn only where no longer path already implies it (the table in design.md lists every link).

    python3 docs/layers_svg.py [OUT.svg]        (make docs-figures runs it)
    python3 docs/layers_svg.py --check          (the test docs.layers_svg: the picture is current)
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def read_layers():
    text = (ROOT / "core/CMakeLists.txt").read_text()
    uses = {}
    for m in re.finditer(r"^shardlab_layer\(([^)]*)\)", text, re.M):
        words = m.group(1).split()
        area, deps = words[0], [w for w in words[1:] if w not in ("PUBLIC", "PRIVATE")]
        uses[area] = set(deps)
    apps = (ROOT / "apps/shardlab/CMakeLists.txt").read_text()
    m = re.search(r"target_link_libraries\(shardlab_commands(.*?)\)", apps, re.S)
    uses["apps/shardlab"] = {w[len("shardlab_"):] for w in m.group(1).split()
                             if w.startswith("shardlab_") and w[len("shardlab_"):] in uses}
    return uses


def reachable(uses, a):
    seen, todo = set(), list(uses[a])
    while todo:
        b = todo.pop()
        if b not in seen:
            seen.add(b)
            todo.extend(uses[b])
    return seen


def main():
    check = "--check" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--check"]
    out = Path(args[0]) if args else ROOT / "docs/img/layers.svg"
    uses = read_layers()
    level = {}
    for a in uses:  # the calls are bottom up, so every dependency already has its level
        level[a] = 1 + max((level[b] for b in uses[a]), default=-1)
    # Transitive reduction: drop a->c when some other b in uses[a] reaches c.
    edges = [(a, c) for a in uses for c in uses[a]
             if not any(c in reachable(uses, b) for b in uses[a] if b != c)]

    rows = {}
    for a in uses:
        rows.setdefault(level[a], []).append(a)
    box_w, box_h, gap_x, gap_y, margin, lane = 118, 34, 26, 40, 20, 12
    skips = [(a, c) for a, c in edges if level[a] - level[c] > 1]  # drawn around the rows
    widest = max(len(r) for r in rows.values())
    width = margin * 2 + widest * box_w + (widest - 1) * gap_x + 2 * lane * (len(skips) + 1)
    height = margin * 2 + len(rows) * box_h + (len(rows) - 1) * gap_y
    pos = {}
    for lv, names in rows.items():
        row_w = len(names) * box_w + (len(names) - 1) * gap_x
        x0 = (width - row_w) / 2
        y = height - margin - box_h - lv * (box_h + gap_y)
        for i, a in enumerate(names):
            pos[a] = (x0 + i * (box_w + gap_x), y)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="sans-serif" font-size="13">',
           '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
           '</defs>',
           f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>']
    for i, (a, c) in enumerate(sorted(skips)):
        (xa, ya), (xc, yc) = pos[a], pos[c]
        right = xc + box_w / 2 >= width / 2
        x_lane = width - lane * (i + 1) if right else lane * (i + 1)
        # down into the gap below the source row, out to a lane beside the rows, down, and in
        # to the target's outer side (rows hold at most two boxes, so no box is crossed)
        xs, ys = xa + box_w / 2, ya + box_h + gap_y * (0.3 + 0.4 * i / max(1, len(skips)))
        xt = xc + box_w if right else xc
        svg.append(f'<polyline points="{xs:.0f},{ya + box_h:.0f} {xs:.0f},{ys:.0f} '
                   f'{x_lane:.0f},{ys:.0f} {x_lane:.0f},{yc + box_h / 2:.0f} {xt:.0f},'
                   f'{yc + box_h / 2:.0f}" fill="none" stroke="#555" stroke-width="1.2" '
                   f'marker-end="url(#a)"/>')
    for a, c in sorted(set(edges) - set(skips)):
        (xa, ya), (xc, yc) = pos[a], pos[c]
        svg.append(f'<line x1="{xa + box_w / 2:.0f}" y1="{ya + box_h:.0f}" '
                   f'x2="{xc + box_w / 2:.0f}" y2="{yc:.0f}" stroke="#555" stroke-width="1.2" '
                   f'marker-end="url(#a)"/>')
    for a, (x, y) in pos.items():
        label = a if "/" in a else f"core/{a}"
        fill = "#fde8c8" if "/" in a and not label.startswith("core/") else "#dbe8f6"
        svg.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{box_w}" height="{box_h}" rx="5" '
                   f'fill="{fill}" stroke="#335"/>')
        svg.append(f'<text x="{x + box_w / 2:.0f}" y="{y + box_h / 2 + 5:.0f}" '
                   f'text-anchor="middle">{label}</text>')
    svg.append("</svg>")
    text = "\n".join(svg) + "\n"
    if check:
        if not out.exists() or out.read_text() != text:
            sys.exit(f"{out} is not the picture of core/CMakeLists.txt's layer table: "
                     "run python3 docs/layers_svg.py")
        print(f"{out}: current")
        return
    out.write_text(text)
    print(f"{out}: {len(uses)} layers, {len(edges)} arrows (of "
          f"{sum(len(v) for v in uses.values())} links)")


if __name__ == "__main__":
    main()
