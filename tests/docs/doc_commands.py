"""The ctest docs.commands: every command in a fenced block of README.md and docs/**/*.md must
parse, and the blocks marked cheap must run.

A command is a line of a fenced block that starts with a program of the project or its tools
(`build/bin/X`, `build-cuda/bin/X`, `shardlab`, `shardlab-viewer`, `make`, `mpirun`, `xvfb-run`,
`cmake`, `ctest`, `python3`, `bash`, after optional `$ ` and VAR=value prefixes); a line ending in
`\\` continues on the next. Output lines in the same block are not commands. The rule for page
authors (docs/README.md) is one HTML comment before the block's opening fence:

    <!-- docs-test: run -->    every command of the block runs here, and must exit with 0
    <!-- docs-test: skip -->   nothing of the block is checked (other machines, pseudo-commands)
    (no comment)               each command is only parsed

Parsing means: the program exists (for make: the target; for cmake: the preset; for bash and
python3: the script), and each --option of a project binary is one its `--help` lists, for
`shardlab` that of its subcommand. A binary this build lacks (the viewer without SHARDLAB_VIEWER,
anything of build-cuda/ not built here) is parsed against build/bin's namesake or reported as not
checked. Runs happen in WORK/<page>/ (build/ and data/ linked there), one BLAS thread, 120 s each.

    python3 tests/docs/doc_commands.py SOURCE_DIR BIN_DIR WORK_DIR [--list]"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

PROGRAM = re.compile(r"^(build(-cuda)?/bin/[\w.-]+|shardlab(-viewer)?|make|mpirun|mpiexec|xvfb-run|"
                     r"cmake|ctest|python3|bash)$")
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
MARK = re.compile(r"<!--\s*docs-test:\s*(run|skip)\s*-->")


class Command:
    def __init__(self, page, line, text, mode):
        self.page, self.line, self.text, self.mode = page, line, text, mode

    def where(self):
        return f"{self.page}:{self.line}"


def words(text):
    try:
        return shlex.split(text, comments=True)
    except ValueError as e:
        raise ValueError(f"shell syntax: {e}")


def extract(source):
    pages = [os.path.join(source, "README.md")] + sorted(
        glob.glob(os.path.join(source, "docs", "**", "*.md"), recursive=True))
    commands = []
    for path in pages:
        page = os.path.relpath(path, source)
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            if not lines[i].startswith("```"):
                i += 1
                continue
            mode, k = "parse", i - 1
            while k >= 0 and lines[k].strip().startswith("<!--"):  # the comments just above
                m = MARK.search(lines[k])
                if m:
                    mode = m.group(1)
                k -= 1
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                text, first = lines[j].strip(), j
                if text.startswith("$ "):
                    text = text[2:]
                while text.endswith("\\") and j + 1 < len(lines):
                    j += 1
                    text = text[:-1] + " " + lines[j].strip()
                toks = text.split()
                while toks and ENV.match(toks[0]):
                    toks = toks[1:]
                if toks and PROGRAM.match(toks[0]) and mode != "skip":
                    commands.append(Command(page, first + 1, text, mode))
                j += 1
            i = j + 1
    return commands


class Checker:
    def __init__(self, source, bin_dir):
        self.source, self.bin = source, bin_dir
        self.helps = {}
        makefile = open(os.path.join(source, "Makefile"), encoding="utf-8").read()
        self.make_targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", makefile, re.M))
        presets = json.load(open(os.path.join(source, "CMakePresets.json"), encoding="utf-8"))
        self.presets = {p["name"] for p in presets.get("configurePresets", [])}

    def help(self, argv):
        key = tuple(argv)
        if key not in self.helps:
            p = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=30, stdin=subprocess.DEVNULL)
            self.helps[key] = p.stdout
        return self.helps[key]

    def binary(self, name):
        path = os.path.join(self.bin, name)
        return path if os.path.exists(path) else None

    def options(self, argv, args, what):
        """Each --option (or -o) among args must appear in `argv --help`."""
        text = self.help(argv)
        for a in args:
            if not a.startswith("-") or a == "-" or re.match(r"^-\d", a):
                continue
            opt = a.split("=", 1)[0]
            if not re.search(r"(^|[\s,\[])" + re.escape(opt) + r"(?=[\s=,\[\]{]|$)", text, re.M):
                return f"{what} has no option {opt} (not in its --help)"
        return None

    def benchmark_filter(self, path, args, under_mpirun):
        """A Google Benchmark binary's --benchmark_filter must match some benchmark, and one that
        matches only MPI benchmarks (/mpi in the name) needs mpirun in front. Without mpirun the
        MPI benchmarks are listed with ranks:0; under mpirun -np N they are ranks:N, so both are
        tried."""
        filters = [a.split("=", 1)[1] for a in args if a.startswith("--benchmark_filter=")]
        if not filters:
            return None
        # The benchmarks a binary registers can depend on its own options (--presets=...).
        own = [a for a in args if not a.startswith("--benchmark_")]
        key = (path, "--benchmark_list_tests", *own)
        if key not in self.helps:
            p = subprocess.run([path, *own, "--benchmark_list_tests"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            self.helps[key] = p.stdout
        names = []
        for n in self.helps[key].split("\n"):
            if "/mpi" in n and "ranks:0" in n:
                names += [n.replace("ranks:0", f"ranks:{k}") for k in range(1, 9)]
            elif n.strip():
                names.append(n)
        try:
            hit = [n for n in names if re.search(filters[-1], n)]
        except re.error as e:
            return f"--benchmark_filter={filters[-1]}: not a regular expression ({e})"
        if not hit and under_mpirun:
            return None  # its MPI benchmarks may exist only under mpirun: not checkable here
        if not hit:
            return (f"--benchmark_filter={filters[-1]} matches no benchmark of "
                    f"{os.path.basename(path)}")
        if all("/mpi" in n for n in hit) and not under_mpirun:
            return (f"--benchmark_filter={filters[-1]} matches only MPI benchmarks: the command "
                    "needs mpirun in front")
        return None

    def program(self, toks, under_mpirun=False):
        """Checks a project binary with its arguments: (error or None, note or None)."""
        prog = toks[0]
        name = prog.rsplit("/", 1)[-1]
        path = self.binary(name)
        if path is None:
            if prog.startswith("build-cuda/") or name == "shardlab-viewer":
                return None, f"{name} not built here: not checked"
            return f"no program {name} in {self.bin}", None
        args = toks[1:]
        if name.startswith("bench_"):
            err = self.benchmark_filter(path, args, under_mpirun)
            if err:
                return err, None
        if name == "shardlab":
            subs = re.findall(r"^  (\w+)\s", self.help([path]).split("Subcommands:")[-1], re.M)
            if not args or args[0].startswith("-"):
                return self.options([path], args, "shardlab"), None
            if args[0] not in subs:
                return f"shardlab has no subcommand {args[0]} (it has {', '.join(subs)})", None
            return self.options([path, args[0]], args[1:], f"shardlab {args[0]}"), None
        return self.options([path], args, name), None

    def check(self, cmd):
        """(error or None, note or None, argv to run or None)."""
        toks = words(cmd.text)
        while toks and ENV.match(toks[0]):
            toks = toks[1:]
        head = toks[0]
        if head in ("mpirun", "mpiexec", "xvfb-run"):
            rest = [t for t in toks[1:] if PROGRAM.match(t) and t not in ("make",)]
            if not rest:
                return f"{head}: no program of the project in the command", None, None
            toks = toks[toks.index(rest[0]):]
            err, note = self.program(toks, under_mpirun=head in ("mpirun", "mpiexec"))
            return err, note, None
        if head.startswith("build") or head.startswith("shardlab"):
            err, note = self.program(toks)
            run = None if note else toks
            return err, note, run
        if head == "make":
            targets = [t for t in toks[1:] if not t.startswith("-") and "=" not in t]
            for t in targets:
                if t not in self.make_targets:
                    return f"make has no target {t}", None, None
            if targets == ["lesson"]:
                n = next((t.split("=", 1)[1] for t in toks if t.startswith("N=")), "1")
                lesson = glob.glob(os.path.join(self.bin, f"lesson_0{n}_*"))
                if len(lesson) != 1:
                    return f"make lesson N={n}: no lesson_0{n}_* in {self.bin}", None, None
                extra = next((words(t.split("=", 1)[1]) for t in toks if t.startswith("ARGS=")), [])
                name = os.path.basename(lesson[0])
                err = self.options([lesson[0]], extra, f"{name} (ARGS)")
                return err, None, ["build/bin/" + name] + extra
            return None, "make: target checked, not run", None
        if head == "cmake":
            if "--preset" in toks:
                p = toks[toks.index("--preset") + 1]
                if p not in self.presets:
                    return f"cmake has no preset {p}", None, None
            return None, None, None
        if head in ("bash", "python3"):
            script = next((t for t in toks[1:] if not t.startswith("-")), None)
            if script and not os.path.exists(os.path.join(self.source, script)):
                return f"{head}: no script {script}", None, None
            return None, None, None
        return None, None, None  # ctest


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    source, bin_dir, work = (os.path.abspath(a) for a in sys.argv[1:4])
    listing = "--list" in sys.argv[4:]
    shutil.rmtree(work, ignore_errors=True)  # a failed run leaves its directories for a look
    commands = extract(source)
    checker = Checker(source, bin_dir)
    failures, ran, notes = [], 0, 0
    for cmd in commands:
        try:
            err, note, argv = checker.check(cmd)
        except (ValueError, subprocess.TimeoutExpired) as e:
            err, note, argv = str(e), None, None
        if listing:
            print(f"{cmd.where()}: [{cmd.mode}] {cmd.text}" + (f"  ({note})" if note else ""))
        if err:
            failures.append(f"{cmd.where()}: {err}\n    {cmd.text}")
            continue
        notes += note is not None
        if cmd.mode != "run":
            continue
        if argv is None:
            failures.append(f"{cmd.where()}: marked run, but only project binaries and "
                            f"`make lesson` run here ({note or 'not runnable'})\n    {cmd.text}")
            continue
        cwd = os.path.join(work, re.sub(r"[^\w]+", "_", cmd.page))
        os.makedirs(cwd, exist_ok=True)
        for name, target in (("build", os.path.dirname(bin_dir)), ("data",
                             os.path.join(source, "data"))):
            if not os.path.lexists(os.path.join(cwd, name)):
                os.symlink(target, os.path.join(cwd, name))
        if argv[0].startswith("shardlab"):
            argv = [os.path.join(bin_dir, argv[0])] + argv[1:]
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        try:
            p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
            rc, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired:
            rc, out = "timeout (120 s)", ""
        ran += 1
        if rc != 0:
            failures.append(f"{cmd.where()}: exited with {rc}\n    {cmd.text}\n" + out[-2000:])
    print(f"docs.commands: {len(commands)} commands in fenced blocks, {ran} run, "
          f"{len(commands) - ran} parsed only ({notes} of them not fully checkable here)")
    if failures:
        print(f"\n{len(failures)} failing (the rule for pages: docs/README.md):")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
