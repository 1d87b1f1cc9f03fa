#!/usr/bin/python3
"""ctest bench.gpu_scripts: the parts of issue 16's device check that run without a GPU.

    /usr/bin/python3 bench/gpu/gpu_scripts_test.py BIN_DIR WORK_DIR

- compare_losses.py: two CPU runs of `tiny` that compute the same thing (no_shard on one rank,
  full_shard on two) agree; a copy with one loss moved by 1e-3 fails naming that step; a run
  directory that is not there is exit 2;
- device_check.sh, bundle.sh, gpu_speed.sh and gpu_env.sh parse (bash -n), and device_check.sh
  refuses to start without its bundle, or on a machine with no GPU, with exit 2 and a message
  saying what to do (gpu_speed.sh too without its bundle);
- gpu_report.py renders docs/gpu.md's H100 table from its JSON with this build's simulate, and a
  configuration simulate refuses is an error naming it.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
COMPARE = os.path.join(HERE, "compare_losses.py")
FAILURES = []


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def train(shardlab, run_dir, ranks, strategy):
    r = run([shardlab, "train", "--model", "tiny", "--ranks", str(ranks), "--strategy", strategy,
             "--steps", "3", "--run-dir", run_dir, "--overwrite"])
    if r.returncode != 0:
        sys.exit("shardlab train failed: " + r.stderr)


def main():
    bin_dir, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shardlab = os.path.join(bin_dir, "shardlab")
    a, b, c = (os.path.join(work, n) for n in ("a", "b", "c"))
    train(shardlab, a, 1, "no_shard")
    train(shardlab, b, 2, "full_shard")
    r = run(["/usr/bin/python3", COMPARE, a, b])
    expect(r.returncode == 0 and "3 steps within 0.0001" in r.stdout,
           "the same model sharded agrees: %d %s %s" % (r.returncode, r.stdout, r.stderr))

    # c: b with step 2's loss moved by 1e-3
    shutil.copytree(b, c)
    path = os.path.join(c, "rank0.jsonl")
    lines = open(path).read().splitlines(True)
    for i, line in enumerate(lines):
        if '"kind":"step"' in line:
            e = json.loads(line)
            if e["step"] == 2:
                e["loss"] += 1e-3
                lines[i] = json.dumps(e, separators=(",", ":")) + "\n"
    open(path, "w").write("".join(lines))
    r = run(["/usr/bin/python3", COMPARE, a, c, "--tol", "1e-4"])
    expect(r.returncode == 1 and "step 2:" in r.stderr,
           "a loss off by 1e-3 fails naming step 2: %d %s" % (r.returncode, r.stderr))
    r = run(["/usr/bin/python3", COMPARE, a, c, "--tol", "1e-2"])
    expect(r.returncode == 0, "the same within 1e-2 passes: %d %s" % (r.returncode, r.stderr))
    r = run(["/usr/bin/python3", COMPARE, a, os.path.join(work, "missing")])
    expect(r.returncode == 2 and "missing" in r.stderr,
           "a missing run directory is exit 2: %d %s" % (r.returncode, r.stderr))

    for script in ("device_check.sh", "bundle.sh", "gpu_speed.sh", "gpu_env.sh"):
        r = run(["bash", "-n", os.path.join(HERE, script)])
        expect(r.returncode == 0, "%s parses: %s" % (script, r.stderr))
    env = dict(os.environ, BUNDLE=os.path.join(work, "no-bundle"), OUT=os.path.join(work, "out"))
    r = run(["bash", os.path.join(HERE, "device_check.sh")], env=env)
    expect(r.returncode == 2 and "bundle.sh" in r.stderr,
           "no bundle: exit 2 pointing to bundle.sh: %d %s" % (r.returncode, r.stderr))
    # A bundle, and a PATH whose nvidia-smi fails: the machine has no GPU.
    bundle = os.path.join(work, "bundle")
    os.makedirs(os.path.join(bundle, "bin"))
    for name in ("shardlab", "shardlab_cuda_tests"):
        os.symlink("/bin/true", os.path.join(bundle, "bin", name))
    fake = os.path.join(work, "fakebin")
    os.makedirs(fake)
    with open(os.path.join(fake, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
    env = dict(env, BUNDLE=bundle, PATH=fake + ":" + os.environ["PATH"])
    r = run(["bash", os.path.join(HERE, "device_check.sh")], env=env)
    expect(r.returncode == 2 and "no GPU" in r.stderr,
           "no GPU: exit 2 saying so: %d %s" % (r.returncode, r.stderr))
    env = dict(os.environ, BUNDLE=os.path.join(work, "no-bundle"), OUT=os.path.join(work, "out"))
    r = run(["bash", os.path.join(HERE, "gpu_speed.sh")], env=env)
    expect(r.returncode == 2 and "bundle.sh" in r.stderr,
           "gpu_speed.sh without a bundle: exit 2 pointing to bundle.sh: %d %s"
           % (r.returncode, r.stderr))
    r = run(["/usr/bin/python3", "-m", "py_compile", os.path.join(HERE, "torch_gpt2_speed.py")])
    expect(r.returncode == 0, "torch_gpt2_speed.py compiles: %s" % r.stderr)

    # gpu_report.py: the measured GPU rows beside this build's simulate of each; a row whose
    # configuration simulate refuses is an error naming the command, not a table.
    data = os.path.join(ROOT, "docs", "bench", "data", "gpu_h100.json")
    report = os.path.join(HERE, "gpu_report.py")
    r = run(["/usr/bin/python3", report, data, "--shardlab", shardlab], cwd=work)
    expect(r.returncode == 0 and "| ShardLab no_shard, params f32 |" in r.stdout
           and "| PyTorch eager bf16 |" in r.stdout,
           "gpu_report.py renders the H100 table: %d %s %s" % (r.returncode, r.stdout, r.stderr))
    bad = json.load(open(data))
    bad["shardlab"][0]["strategy"] = "no_such_strategy"
    bad_path = os.path.join(work, "bad.json")
    json.dump(bad, open(bad_path, "w"))
    r = run(["/usr/bin/python3", report, bad_path, "--shardlab", shardlab], cwd=work)
    expect(r.returncode != 0 and "no_such_strategy" in r.stderr,
           "gpu_report.py names the configuration simulate refused: %d %s"
           % (r.returncode, r.stderr))
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    print("bench.gpu_scripts: ok")


if __name__ == "__main__":
    main()
