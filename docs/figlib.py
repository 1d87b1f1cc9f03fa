"""What every figure maker of the pages shares (docs/figures.py, docs/docs_check.py and the makers
they load): running a command in the scratch directory, marking the parts of its output that
depend on timing, and where pictures are written.

Timing. A figure is the output of real runs, so some of it moves from run to run: durations,
tokens/s, busbw, the machine's load, and what is chosen by them (the slowest collective, the
ranks' waits). A maker marks each such part with T(text), or gives rules (regular expressions) that
mark_timing() applies to a command's output. Pages get the text without the marks; `make
docs-check` turns the marked text into a pattern in which each marked part matches anything, and
checks that the page's block matches it line by line. Everything not marked must be the same.

Pictures. A maker writes each picture to picture(path, ...), a path under the output root: the
repository for `make docs-figures`, a scratch tree for `make docs-check`; the call also records
how docs-check compares it (regions that depend on timing are left out)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Where pages and pictures go: the repository, or docs-check's scratch tree (set_output_root).
_out_root = ROOT
# Pictures written since the last take_pictures(): (path relative to the root, timed regions,
# what the regions are).
_pictures = []

# The marks around a part that depends on timing (Unicode private-use characters: never in
# program output).
T_OPEN, T_CLOSE = "\ue000", "\ue001"


def set_output_root(path):
    global _out_root
    _out_root = os.path.abspath(path)


def output_root():
    return _out_root


def T(text):
    """`text` depends on timing: docs-check matches anything in its place."""
    return f"{T_OPEN}{text}{T_CLOSE}"


def strip_marks(text):
    return text.replace(T_OPEN, "").replace(T_CLOSE, "")


def mark_timing(text, rules):
    """Marks, in a command's output, what each rule matches: the rule's groups when it has any,
    else its whole match. Overlapping marks merge."""
    spans = []
    for rule in rules:
        for m in re.finditer(rule, text, re.M):
            if m.re.groups:
                spans += [m.span(g) for g in range(1, m.re.groups + 1) if m.start(g) >= 0]
            else:
                spans.append(m.span())
    merged = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for a, b in merged:
        out += [text[pos:a], T(text[a:b])]
        pos = b
    return "".join(out) + text[pos:]


# Parts of program output that depend on timing, for the figures that run real training or
# benchmarks (simulated runs are deterministic and use none): a number with a unit of time or a
# rate, tokens/s, the machine's load, wall-clock dates.
NUM = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
TIMED = [
    NUM + r" ?(?:ns|us|µs|ms|s|sec|min)\b",
    NUM + r" ?(?:[KMGT]i?B/s|[KMGT]b/s|GB/s|tokens/s)",
    r"tokens/s:? +(" + NUM + ")",
    r"load average:? ((?:" + NUM + r",? ?)+)",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?",
    r"\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? UTC",
    r"-\d{8}-\d{6}\b",
]


def picture(rel, timed=None, note=""):
    """The path to write picture `rel` (relative to the repository root, e.g. docs/img/x.png) in
    the current output root. `timed`: rectangles (x, y, w, h) of the picture whose pixels depend
    on timing, left out of docs-check's comparison; `note` says what they are."""
    _pictures.append((rel, [tuple(int(v) for v in r) for r in (timed or [])], note))
    path = os.path.join(_out_root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def take_pictures():
    """The pictures recorded since the last call."""
    global _pictures
    got, _pictures = _pictures, []
    return got


def run(cmd, cwd, timed=False):
    """Runs a shell command line in the scratch directory with one BLAS thread; returns its output
    (and the CPU seconds of its children when `timed`)."""
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


def excerpt(out, keep, cmd=None):
    """The lines of `out` that `keep` (a function of the line) accepts, with "..." where lines were
    left out, so an excerpt never hides that it is one. `cmd` first when given."""
    lines, skipped = ([cmd] if cmd else []), False
    for line in out.rstrip("\n").split("\n"):
        if keep(line):
            if skipped:
                lines.append("...")
            lines.append(line)
            skipped = False
        else:
            skipped = True
    if skipped:
        lines.append("...")
    return lines


def loadavg():
    """The load average over 1, 5 and 15 minutes, marked as timing."""
    try:
        return T(" ".join(open("/proc/loadavg").read().split()[:3]))
    except OSError:
        return T("unknown")
