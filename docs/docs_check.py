"""make docs-check: regenerates every figure of the pages into a scratch tree and fails on any
difference from the committed pages, pictures and files beyond what is declared as timing.

    /usr/bin/python3 docs/docs_check.py [--build build] [--fast] [NAME ...]

It runs the makers of docs/figures.py (all of them, the slow ones too unless --fast) with their
commands in BUILD/docs-check/work/ and their output under BUILD/docs-check/tree/: the pages with
each figure block spliced in again, and every picture and generated file. Then it compares, and
prints one line per difference, page:line first:

- a figure block, line by line: each line of the page's block must match the regenerated line,
  where a part the maker marked as timing (figlib.T, or its rules: durations, tokens/s, busbw,
  load, dates, and what they decide) matches anything and runs of spaces may change width;
- a generated file (docs/lessons/table.md, the lesson diffs, docs/bench/report.md, layers.svg):
  byte for byte;
- a picture (PNG): the same size, and outside the rectangles its maker declared as timing, no
  8 x 8 tile with 4 or more pixels whose colour differs by more than 48 of 255 in a channel. A
  few scattered pixels, as a renderer or font hinting moves them, pass; a changed word, number,
  bar or label does not.

Exits 0 when nothing differs, 1 otherwise. Needs what the figures need (xvfb-run, mpirun,
matplotlib) and numpy and Pillow for the pictures (Debian's python3-matplotlib brings both, hence
/usr/bin/python3)."""
import argparse
import difflib
import glob
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figlib  # noqa: E402
import figures  # noqa: E402
from figlib import ROOT, T_CLOSE, T_OPEN  # noqa: E402

TILE, TILE_PIXELS, CHANNEL = 8, 4, 48
MAX_SHOWN = 8  # differences shown per figure and page


# ---- figure blocks -------------------------------------------------------------------------------

def line_pattern(line):
    """A regular expression for a regenerated line: marked parts match anything, runs of spaces
    any width (none next to a marked part)."""
    out = []
    parts = re.split(f"({T_OPEN}.*?{T_CLOSE})", line)
    for k, p in enumerate(parts):
        if p.startswith(T_OPEN):
            out.append(".*?")
            continue
        for m in re.finditer(r" +|[^ ]+", p):
            s = m.group()
            if s.startswith(" "):
                at_edge = (m.start() == 0 and k > 0) or (m.end() == len(p) and k + 1 < len(parts))
                out.append(" *" if at_edge else " +")
            else:
                out.append(re.escape(s))
    return re.compile("^" + "".join(out) + " *$")


def shown(line):
    """A regenerated line for a message: timing parts in ⟨⟩."""
    return line.replace(T_OPEN, "⟨").replace(T_CLOSE, "⟩")


def compare_lines(page_lines, made_lines):
    """LCS of the page's lines and the regenerated ones (match = the pattern matches). Returns
    (page indices not matched, [(page index before which, regenerated line)] not matched)."""
    pats = [line_pattern(l) for l in made_lines]
    m, n = len(page_lines), len(made_lines)
    match = [[bool(pats[j].match(page_lines[i])) for j in range(n)] for i in range(m)]
    lcs = [[0] * (n + 1) for _ in range(m + 1)]
    for i in range(m - 1, -1, -1):
        for j in range(n - 1, -1, -1):
            lcs[i][j] = (lcs[i + 1][j + 1] + 1 if match[i][j]
                         else max(lcs[i + 1][j], lcs[i][j + 1]))
    i = j = 0
    only_page, only_made = [], []
    while i < m or j < n:
        if i < m and j < n and match[i][j] and lcs[i][j] == lcs[i + 1][j + 1] + 1:
            i, j = i + 1, j + 1
        elif j < n and (i == m or lcs[i][j + 1] >= lcs[i + 1][j]):
            only_made.append((i, made_lines[j]))
            j += 1
        else:
            only_page.append(i)
            i += 1
    return only_page, only_made


def block_of(path, marker):
    """(1-based line of the block's first line, the block's lines) between the page's markers."""
    lines = open(path, encoding="utf-8").read().split("\n")
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    try:
        b = lines.index(begin)
        e = lines.index(end, b)
    except ValueError:
        return None, None
    return b + 2, lines[b + 1:e]


def check_block(fig, page, block, problems):
    first, page_lines = block_of(os.path.join(ROOT, page), fig.marker)
    if page_lines is None:
        problems.append(f"{page}: no <!-- {fig.marker}:begin/end --> markers (figure {fig.name})")
        return
    only_page, only_made = compare_lines(page_lines, block.split("\n"))
    out = [f"{page}:{first + i}: on the page, not regenerated: {page_lines[i]}"
           for i in only_page]
    out += [f"{page}:{first + i}: regenerated, not on the page: {shown(l)}" for i, l in only_made]
    out.sort(key=lambda s: int(s.split(":")[1]))
    if len(out) > MAX_SHOWN:
        out = out[:MAX_SHOWN] + [f"{page}: ... {len(out) - MAX_SHOWN} more lines differ in "
                                 f"figure {fig.name}"]
    problems += out


# ---- pictures and files ----------------------------------------------------------------------

def referenced_at(rel):
    """page:line of the pages that show `rel` (a picture or file), for the messages."""
    name = os.path.basename(rel)
    hits = []
    for page in [os.path.join(ROOT, "README.md")] + sorted(
            glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)):
        for k, line in enumerate(open(page, encoding="utf-8"), 1):
            if name in line and ("](" in line or "<img" in line):
                hits.append(f"{os.path.relpath(page, ROOT)}:{k}")
    return hits


def compare_png(committed, made, regions):
    """None when the pictures match outside `regions`, else what differs."""
    import numpy as np
    from PIL import Image
    a = np.asarray(Image.open(committed).convert("RGB"), dtype=np.int16)
    b = np.asarray(Image.open(made).convert("RGB"), dtype=np.int16)
    if a.shape != b.shape:
        return (f"size {a.shape[1]}x{a.shape[0]} committed, {b.shape[1]}x{b.shape[0]} "
                "regenerated")
    diff = np.abs(a - b).max(axis=2) > CHANNEL
    for x, y, w, h in regions:
        diff[max(0, y):max(0, y + h), max(0, x):max(0, x + w)] = False
    hh, ww = diff.shape
    pad = np.zeros(((hh + TILE - 1) // TILE * TILE, (ww + TILE - 1) // TILE * TILE), dtype=bool)
    pad[:hh, :ww] = diff
    tiles = pad.reshape(pad.shape[0] // TILE, TILE, pad.shape[1] // TILE, TILE).sum(axis=(1, 3))
    bad = np.argwhere(tiles >= TILE_PIXELS)
    if len(bad) == 0:
        return None
    ys, xs = bad[:, 0] * TILE, bad[:, 1] * TILE
    return (f"{len(bad)} tiles of {TILE}x{TILE} differ outside the timed regions, within "
            f"x {xs.min()}-{xs.max() + TILE}, y {ys.min()}-{ys.max() + TILE}")


def compare_file(committed, made):
    a = open(committed, encoding="utf-8").read().split("\n")
    b = open(made, encoding="utf-8").read().split("\n")
    if a == b:
        return None, None
    for k, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return k, f"committed `{x[:120]}`, regenerated `{y[:120]}`"
    k = min(len(a), len(b)) + 1
    return k, f"{len(a)} lines committed, {len(b)} regenerated"


def check_outputs(fig, outputs, tree, problems):
    for rel, regions, _note in outputs:
        committed, made = os.path.join(ROOT, rel), os.path.join(tree, rel)
        if not os.path.exists(committed):
            problems.append(f"{rel}: regenerated by figure {fig.name}, not in the repository")
            continue
        where = referenced_at(rel)
        at = f" (shown at {', '.join(where)})" if where else ""
        if rel.endswith(".png"):
            why = compare_png(committed, made, regions)
            if why:
                problems.append(f"{rel}{at}: {why}")
        else:
            line, why = compare_file(committed, made)
            if why:
                problems.append(f"{rel}:{line}{at}: {why}")


# ---- main ----------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build directory (default build)")
    ap.add_argument("--fast", action="store_true", help="leave out the figures that take minutes")
    ap.add_argument("names", nargs="*", help="figures to check (default: all)")
    a = ap.parse_args()
    t0 = time.time()
    load0 = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
    unknown = [n for n in a.names if n not in figures.BY_NAME]
    if unknown:
        sys.exit(f"docs/docs_check.py: unknown figure {unknown}; known: "
                 f"{', '.join(figures.BY_NAME)}")
    build = os.path.abspath(os.path.join(ROOT, a.build))
    base = os.path.join(build, "docs-check")
    tree = os.path.join(base, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    for page in [os.path.join(ROOT, "README.md")] + glob.glob(
            os.path.join(ROOT, "docs", "**", "*.md"), recursive=True):
        dst = os.path.join(tree, os.path.relpath(page, ROOT))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(page, dst)
    work = os.path.join(base, "work")
    os.makedirs(work, exist_ok=True)
    for name, target in (("build", build), ("data", os.path.join(ROOT, "data"))):
        if not os.path.lexists(os.path.join(work, name)):
            os.symlink(target, os.path.join(work, name))
    figlib.set_output_root(tree)
    figs = ([figures.BY_NAME[n] for n in a.names] if a.names
            else [f for f in figures.FIGURES if not (a.fast and f.slow)])
    problems, pictures, pages = [], 0, set()
    for fig in figs:
        figlib.take_pictures()
        block = figures.make_figure(fig, work)
        outputs = figlib.take_pictures()
        before = len(problems)
        if block is not None:
            for page in fig.pages:
                check_block(fig, page, block, problems)
                figures.splice(os.path.join(tree, page), fig.marker, block, work)
                pages.add(page)
        check_outputs(fig, outputs, tree, problems)
        pictures += len(outputs)
        for p in problems[before:]:
            print("  DIFFERS " + p, flush=True)
    took = time.time() - t0
    load1 = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
    print()
    for p in problems:
        print(p)
    print(f"docs-check: {len(figs)} figures on {len(pages)} pages, {pictures} pictures and files, "
          f"{int(took // 60)} min {took % 60:.0f} s (load average {load0} before, {load1} after); "
          f"regenerated tree: {os.path.relpath(tree, ROOT)}; "
          + ("no difference" if not problems else f"{len(problems)} differences"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
