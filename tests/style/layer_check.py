#!/usr/bin/env python3
"""style.layers: the build refuses an include that goes up or across the layer table.

Compiles one-line files with the exact flags of a real source file of a layer (from the build's
compile_commands.json): an include of a layer that target does not link must fail with the guard header's
"is in layer X" error, and an include of a layer it does link must compile. So the enforcement of
docs/design.md's Layers table is itself tested, both ways.

    layer_check.py BUILD_DIR
"""
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# (a source file of the layer whose flags are used, the include, whether it must compile)
CASES = [
    ("core/model/gpt.cpp", "core/comm/communicator.hpp", False),   # model knows no comm
    ("core/model/gpt.cpp", "core/fsdp/engine.hpp", False),          # upward
    ("core/kernels/gelu.cpp", "core/model/config.hpp", False),      # upward
    ("core/comm/local_comm.cpp", "core/fsdp/mesh.hpp", False),      # comm knows no sharding
    ("core/device/cpu_device.cpp", "core/kernels/gelu.hpp", False),  # device knows no kernels
    ("core/checkpoint/save.cpp", "core/fsdp/engine.hpp", False),    # checkpoint knows no engine
    ("core/model/gpt.cpp", "core/kernels/gelu.hpp", True),          # downward, linked
    ("core/fsdp/engine.cpp", "core/comm/communicator.hpp", True),
    ("core/train/train_loop.cpp", "core/checkpoint/save.hpp", True),
]


def compile_args(entries, source):
    for e in entries:
        if e["file"].endswith("/" + source):
            args = e.get("arguments") or shlex.split(e["command"])
            out, skip = [], False
            for a in args:
                if skip:
                    skip = False
                    continue
                if a in ("-o", "-c"):
                    skip = True
                    continue
                if a == "ccache" and not out:
                    continue
                out.append(a)
            return out, e["directory"]
    sys.exit(f"style.layers: {source} is not in compile_commands.json")


def main():
    build = Path(sys.argv[1])
    entries = json.loads((build / "compile_commands.json").read_text())
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for source, include, must_compile in CASES:
            args, cwd = compile_args(entries, source)
            probe = Path(tmp) / "probe.cpp"
            probe.write_text(f'#include "{include}"\n')
            r = subprocess.run(args + ["-fsyntax-only", str(probe)], cwd=cwd,
                               capture_output=True, text=True)
            layer = include.split("/")[1]
            refused = r.returncode != 0 and f"is in layer {layer}" in r.stderr
            ok = (r.returncode == 0) if must_compile else refused
            what = "compiles" if must_compile else "is refused"
            print(f"{'ok  ' if ok else 'FAIL'} {include} from {source}'s layer {what}")
            if not ok:
                failures += 1
                print(r.stderr[:2000])
    if failures:
        sys.exit(f"style.layers: {failures} of {len(CASES)} cases wrong")


if __name__ == "__main__":
    main()
