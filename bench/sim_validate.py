#!/usr/bin/env python3
"""The simulator's times against this machine's (docs/simulate-validation.md).

`make sim-validate` runs it. In stages, each measured one under the shared build lock
(/tmp/shardlab-build.lock, so no build runs beside a timed run) and each kept under a few minutes;
results go to a JSON cache (--work/results.json), so a stage can be rerun alone and `report`
merges whatever the cache holds:

  calibrate          `shardlab calibrate` on 2 local ranks and on 2 MPI processes: two specs
  steps MODEL BACKEND  `shardlab train` (measured median step time, first step excluded; where
                     ranks have cores of their own, the median of 3 passes' medians) against
                     `shardlab simulate --cluster <the backend's spec>` with the same options, for
                     N = 1, 2, 4, no_shard and full_shard, prefetch 0 and 1
  collectives BACKEND  bench_collectives (all_gather in place, reduce_scatter, all_reduce, N = 2,
                     64 KiB to 256 MiB) against `shardlab simulate --collective-times` on the spec
                     `shardlab calibrate` writes in the same turn of the lock
  cpuspeed           bench_cpu_speed: each CPU's sgemm rate in 100 ms windows, alone and all at once
  report             writes the tables into --out between <!-- figure:sim-validation:begin/end -->
  all                every stage in order

  python3 bench/sim_validate.py --bin build/bin all
  python3 bench/sim_validate.py --bin build/bin steps small local      (one stage)
Python 3 standard library only.
"""
import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

MODELS = {  # model -> (global batch, seq): a step of a second or less at one rank
    "small": (8, 128),
    "medium": (4, 128),
}
STEPS = 6  # the first is excluded as warm-up: the median of 5
# Passes over the configurations whose ranks have cores of their own (N = 4 runs once): each
# configuration's measured step is the median of its passes' medians. A slow phase of this shared
# host can hold for seconds, longer than a whole 6-step run (2026-11-23 22:57: small local N = 2
# full_shard prefetch 1 took 185-195 ms in every step, the other N = 2 runs of the stage 127-143),
# so one run per configuration let a single phase decide a cell. A pass takes 15 s to a minute.
STEP_PASSES = 3
RANKS = (1, 2, 4)
STRATEGIES = ("no_shard", "full_shard")
PREFETCH = (0, 1)
COLL_OPS = ("all_gather", "reduce_scatter", "all_reduce")
COLL_SIZES = [64 << 10 << (2 * i) for i in range(7)]  # 64 KiB .. 256 MiB, x4
COLL_REPS = 3  # bench_collectives repetitions per row in one round; a round takes their median
# Rounds of calibrate then bench_collectives, alternated in one turn of the lock; each cell is the
# median over the rounds of both sides. One round of either side at 64 KiB-4 MiB moves by 2-3x
# between runs seconds apart on this shared machine (docs/simulate-validation.md, "Calibrate's
# per-call median against bench_collectives' loop"), more than the 20% being checked; in the
# runs of 2026-11-23 22:46-22:52 a round's own ratio ranged over 0.4-3.8, so five rounds, not three.
COLL_ROUNDS = 5
LOCK = "/tmp/shardlab-build.lock"
CORES = os.cpu_count() or 1


def mpi_prefix(np_):
    flags = os.environ.get("SHARDLAB_MPIRUN_FLAGS", "--oversubscribe --mca btl self,vader").split()
    if os.geteuid() == 0:
        flags.append("--allow-run-as-root")
    return ["mpirun", *flags, "-np", str(np_)]


def load_avg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Cache:
    """results.json; stages may run as separate processes at once, so each put re-reads the file
    under its own lock and merges one key."""

    def __init__(self, path):
        self.path = path
        self.data = self._read()

    def _read(self):
        return json.load(open(self.path)) if os.path.exists(self.path) else {}

    def put(self, key, value):
        with open(self.path + ".lock", "a") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            self.data = self._read()
            self.data[key] = value
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)


class Locked:
    """The shared build lock around one stage (no build runs beside the timed runs). With
    --no-lock the caller holds it already (`flock LOCK python3 bench/sim_validate.py --no-lock
    ...` runs several stages in one turn of the lock)."""

    take = True

    def __init__(self, what):
        self.what = what

    def __enter__(self):
        self.f = open(LOCK, "a")
        t = time.time()
        if Locked.take:
            fcntl.flock(self.f, fcntl.LOCK_EX)
        print(f"[{self.what}] lock taken after {time.time() - t:.0f} s; load {load_avg()}",
              flush=True)
        self.load_before = load_avg()
        self.t0 = time.time()
        return self

    def __exit__(self, *exc):
        self.load_after = load_avg()
        print(f"[{self.what}] {time.time() - self.t0:.0f} s under the lock; load {self.load_after}",
              flush=True)
        if Locked.take:
            fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def run(cmd, env_extra=None, check=True):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.update(env_extra or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        sys.exit(f"sim_validate: failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}"
                 f"\n{p.stderr[-2000:]}")
    return p


def spec_path(work, backend, ranks, model=None):
    """The calibrated spec of `backend`: the one calibrated in the same turn of the lock as
    `model`'s steps where there is one (this shared machine's speed changes by 2x within an hour,
    so a calibration is paired with the measurement it predicts), else the calibrate stage's. For
    N = 4 a copy with ranks_per_node = 4 (the same link constants: the 2-core machine as one node
    of 4 ranks on its devices_per_node CPUs, which they time-share)."""
    base = os.path.join(work, f"this-machine-{backend}.json")
    paired = os.path.join(work, f"this-machine-{backend}-{model}.json")
    if model is not None and os.path.exists(paired):
        base = paired
    if not os.path.exists(base):
        sys.exit(f"sim_validate: {base} missing: run the calibrate stage first")
    spec = json.load(open(base))
    if ranks <= spec["ranks_per_node"]:
        return base
    # A spec calibrated before devices_per_node existed had one CPU per calibrated rank.
    spec.setdefault("devices_per_node", spec["ranks_per_node"])
    spec["ranks_per_node"] = ranks
    out = base[:-len(".json")] + f"-n{ranks}.json"
    with open(out, "w") as f:
        json.dump(spec, f, indent=1)
    return out


def calibrate(a, cache, backend, out):
    cmd = [os.path.join(a.bin, "shardlab"), "calibrate", "--ranks", "2", "--backend", backend,
           "--out", out]
    if backend == "mpi":
        cmd = mpi_prefix(2) + cmd
    p = run(cmd)
    print(p.stderr, end="")  # calibrate logs its measurements on stderr
    cache.put(f"calibrate/{os.path.basename(out)}", {"log": p.stderr, "command": " ".join(cmd)})


def stage_calibrate(a, cache):
    with Locked("calibrate") as lk:
        for backend in ("local", "mpi"):
            calibrate(a, cache, backend, os.path.join(a.work, f"this-machine-{backend}.json"))
    cache.put("calibrate/load", [lk.load_before, lk.load_after])


def train_cmd(a, model, backend, ranks, strategy, prefetch, run_dir):
    b, t = MODELS[model]
    args = ["--model", model, "--strategy", strategy, "--prefetch", str(prefetch), "--batch",
            str(b), "--seq", str(t), "--steps", str(STEPS), "--run-dir", run_dir, "--overwrite"]
    shardlab = os.path.join(a.bin, "shardlab")
    if backend == "mpi":
        return mpi_prefix(ranks) + [shardlab, "train", "--backend", "mpi", *args]
    return [shardlab, "train", "--ranks", str(ranks), *args]


def without_lockstep(spec):
    """A copy of `spec` without efficiency.lockstep_compute_efficiency: ranks compute at the
    calibrated speed as one rank alone does (the model before the lockstep figure)."""
    j = json.load(open(spec))
    j.get("efficiency", {}).pop("lockstep_compute_efficiency", None)
    out = spec[:-len(".json")] + "-no-lockstep.json"
    with open(out, "w") as f:
        json.dump(j, f, indent=1)
    return out


def sim_cmd(a, model, backend, ranks, strategy, prefetch, run_dir, lockstep=True):
    b, t = MODELS[model]
    spec = spec_path(a.work, backend, ranks, model)
    if not lockstep:
        spec = without_lockstep(spec)
    return [os.path.join(a.bin, "shardlab"), "simulate", "--cluster", spec, "--ranks", str(ranks),
            "--model", model, "--strategy", strategy, "--prefetch", str(prefetch), "--batch",
            str(b), "--seq", str(t), "--steps", str(STEPS), "--run-dir", run_dir, "--overwrite"]


def median_step_ms(run_dir):
    s = json.load(open(os.path.join(run_dir, "summary.json")))["step_time"]
    return 1e3 * s["median_s"]


def pass_dir(real, p):
    """Pass p's run directory of a configuration (the first pass keeps the plain name)."""
    return real if p == 0 else f"{real}-pass{p + 1}"


def passes_for(n):
    return STEP_PASSES if n <= CORES else 1


def measured_passes(real):
    """The median step (ms) of each pass's run of one configuration, in pass order."""
    return [median_step_ms(pass_dir(real, p)) for p in range(STEP_PASSES)
            if os.path.exists(os.path.join(pass_dir(real, p), "summary.json"))]


def configs():
    for model in MODELS:
        for backend in ("local", "mpi"):
            for n in RANKS:
                for strategy in STRATEGIES:
                    for pf in PREFETCH:
                        yield model, backend, n, strategy, pf


def run_name(model, backend, n, strategy, pf):
    return f"{model}-{backend}-n{n}-{strategy}-p{pf}"


def stage_steps(a, cache, model, backend):
    """Measured step times (timed, under the lock). Predictions are made by stage_predict: virtual
    times do not depend on the machine's load, so they need no lock."""
    runs = os.path.join(a.work, "runs")
    os.makedirs(runs, exist_ok=True)
    mine = [c for c in configs() if c[:2] == (model, backend)]
    for m, b, n, strategy, pf in mine:  # no pass of an earlier, longer stage may count
        for p in range(1, STEP_PASSES):
            shutil.rmtree(pass_dir(os.path.join(runs, run_name(m, b, n, strategy, pf)), p),
                          ignore_errors=True)
    with Locked(f"steps {model} {backend}") as lk:
        calibrate(a, cache, backend, os.path.join(a.work, f"this-machine-{backend}-{model}.json"))
        for p in range(STEP_PASSES):
            for m, b, n, strategy, pf in mine:
                if p >= passes_for(n):
                    continue
                key = f"measured/{m}/{b}/{n}/{strategy}/{pf}"
                real = os.path.join(runs, run_name(m, b, n, strategy, pf))
                run(train_cmd(a, m, b, n, strategy, pf, pass_dir(real, p)))
                ms = measured_passes(real)
                print(f"  {key}, pass {p + 1}: {ms[-1]:.1f} ms (load {load_avg()})", flush=True)
                cache.put(key, {"ms": statistics.median(ms), "passes": ms, "load": load_avg()})
    cache.put(f"measured/{model}/{backend}/load", [lk.load_before, lk.load_after])


def stage_predict(a, cache):
    """`shardlab simulate` for every measured configuration, with the current calibrated specs."""
    runs = os.path.join(a.work, "runs")
    os.makedirs(runs, exist_ok=True)
    for m, b, n, strategy, pf in configs():
        real = os.path.join(runs, run_name(m, b, n, strategy, pf))
        if not os.path.exists(os.path.join(real, "summary.json")):
            continue
        ms = measured_passes(real)
        cache.put(f"measured/{m}/{b}/{n}/{strategy}/{pf}",
                  {"ms": statistics.median(ms), "passes": ms})
        sim = real + "-sim"
        run(sim_cmd(a, m, b, n, strategy, pf, sim))
        cache.put(f"predicted/{m}/{b}/{n}/{strategy}/{pf}", {"ms": median_step_ms(sim)})
        if n > 1:  # the same without the spec's lockstep figure, to see what it does
            run(sim_cmd(a, m, b, n, strategy, pf, sim + "-no-lockstep", lockstep=False))
            cache.put(f"predicted-no-lockstep/{m}/{b}/{n}/{strategy}/{pf}",
                      {"ms": median_step_ms(sim + "-no-lockstep")})
    for backend in ("local", "mpi"):
        predict_collectives(a, cache, backend)
    if "netns/links" in cache.data:
        spec = netns_spec(a, cache)
        for model, label, opts in netns_configs():
            real = os.path.join(runs, f"netns-{model}-{label.split()[0]}")
            if not os.path.exists(os.path.join(real, "summary.json")):
                continue
            sim = real + "-sim"
            run([os.path.join(a.bin, "shardlab"), "simulate", "--cluster", spec, "--ranks", "4",
                 *opts, "--run-dir", sim, "--overwrite"])
            cache.put(f"netns/{model}/{label}", {"measured_ms": median_step_ms(real),
                                                 "predicted_ms": median_step_ms(sim)})


def stage_collectives(a, cache, backend):
    sizes = "|".join(str(s) for s in COLL_SIZES)
    # The forms the engine calls and calibrate times: all_gather in place, the reductions out of
    # place (on both backends; bench_collectives has `_in_place` rows for local and MPI).
    flt = (f"^(all_gather/{backend}_in_place|(reduce_scatter|all_reduce)/{backend})/"
           f"bytes:({sizes})/ranks:2/")

    def bench_cmd(rnd):
        cmd = [os.path.join(a.bin, "bench_collectives"), f"--benchmark_filter={flt}",
               f"--benchmark_repetitions={COLL_REPS}", "--benchmark_report_aggregates_only=true",
               "--benchmark_out_format=json",
               f"--benchmark_out={coll_bench_path(a.work, backend, rnd)}"]
        return mpi_prefix(2) + cmd if backend == "mpi" else cmd

    with Locked(f"collectives {backend}") as lk:
        # Calibrated in the same turn of the lock as the measurement it predicts, as the steps
        # stages do, and the two alternated COLL_ROUNDS times: on this shared machine the
        # collectives' times move by 2x and more between runs (MPI's polling ranks most: any third
        # process on the 2 cores stalls them), so each cell is the median over the rounds.
        for rnd in range(a.rounds):
            print(f"[collectives {backend}] round {rnd + 1} of {a.rounds}", flush=True)
            calibrate(a, cache, backend, coll_spec_path(a.work, backend, rnd))
            run(bench_cmd(rnd))
    cache.put(f"coll/{backend}/load", [lk.load_before, lk.load_after])
    cache.put(f"coll/{backend}/command", " ".join(bench_cmd(0)).replace("-round0", "-roundR"))
    cache.put(f"coll/{backend}/rounds", a.rounds)
    predict_collectives(a, cache, backend)


def coll_spec_path(work, backend, rnd=0):
    return os.path.join(work, f"this-machine-{backend}-collectives-round{rnd}.json")


def coll_bench_path(work, backend, rnd=0):
    return os.path.join(work, f"collectives-{backend}-round{rnd}.json")


def measured_collectives(path):
    """bench_collectives' JSON: seconds per call for each (op, bytes), in the engine's form."""
    # Each collective in the form the engine calls it, which is also the form calibrate times:
    # all_gather in place (unshard gathers into the buffer that holds the rank's own shard,
    # core/fsdp/unshard.cpp), the reductions out of place.
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue  # with repetitions: the median of their means
        op, where = b["name"].split("/")[:2]
        nbytes = int(b["name"].split("bytes:")[1].split("/")[0])
        scale = {"us": 1e-6, "ms": 1e-3, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        rows[(op, nbytes, where.endswith("_in_place"))] = b["real_time"] * scale
    measured = {}
    for (op, nbytes, _) in rows:
        engine_form = op == "all_gather"
        measured[(op, nbytes)] = rows.get((op, nbytes, engine_form),
                                          rows.get((op, nbytes, not engine_form)))
    return measured


def predict_collectives(a, cache, backend):
    """Per round, bench_collectives' measured times beside the topology model's on the spec
    calibrated just before; per cell the median over the rounds of each side."""
    measured, predicted = {}, {}
    for rnd in range(cache.data.get(f"coll/{backend}/rounds", 0)):
        out, spec = coll_bench_path(a.work, backend, rnd), coll_spec_path(a.work, backend, rnd)
        if not (os.path.exists(out) and os.path.exists(spec)):
            continue
        for k, t in measured_collectives(out).items():
            measured.setdefault(k, []).append(t)
        p = run([os.path.join(a.bin, "shardlab"), "simulate", "--cluster", spec, "--ranks", "2",
                 "--collective-times"])
        for line in p.stdout.splitlines():
            r = json.loads(line)
            predicted.setdefault((r["op"], r["bytes"]), []).append(r["seconds"])
    for k, ts in measured.items():
        if k in predicted:
            cache.put(f"coll/{backend}/{k[0]}/{k[1]}",
                      {"measured_s": statistics.median(ts),
                       "predicted_s": statistics.median(predicted[k]),
                       "ratios": [p / m for p, m in zip(predicted[k], ts)]})


# ---- two "nodes" over a slow link: network namespaces joined by a veth pair limited by tc ------
NS = ("slvA", "slvB")
NS_IP = ("10.99.7.1", "10.99.7.2")
NET_RATE = "1gbit"
NET_MODELS = {"small": (8, 128)}


def netns_setup(work):
    """Two namespaces of our own, a veth pair between them, tbf at NET_RATE on both ends. Returns
    the mpirun prefix that runs under OpenMPI's rsh agent into them, or None (and why) when the
    container cannot (no CAP_NET_ADMIN, no tc)."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return None, "ip or tc (iproute2) not on PATH"
    subprocess.run(["ip", "netns", "del", NS[0]], capture_output=True)
    subprocess.run(["ip", "netns", "del", NS[1]], capture_output=True)
    steps = [["ip", "netns", "add", NS[0]], ["ip", "netns", "add", NS[1]],
             ["ip", "link", "add", "slv-a", "type", "veth", "peer", "name", "slv-b"],
             ["ip", "link", "set", "slv-a", "netns", NS[0]],
             ["ip", "link", "set", "slv-b", "netns", NS[1]]]
    for i, dev in enumerate(("slv-a", "slv-b")):
        steps += [["ip", "-n", NS[i], "addr", "add", NS_IP[i] + "/24", "dev", dev],
                  ["ip", "-n", NS[i], "link", "set", dev, "up"],
                  ["ip", "-n", NS[i], "link", "set", "lo", "up"],
                  ["ip", "netns", "exec", NS[i], "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                   "rate", NET_RATE, "burst", "256kb", "latency", "50ms"]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            netns_teardown()
            return None, f"`{' '.join(cmd)}` failed: {p.stderr.strip()}"
    agent = os.path.join(work, "netns_rsh.sh")
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# OpenMPI's launch agent: `netns_rsh.sh HOST cmd...` runs cmd in the "
                "namespace of HOST.\nhost=$1; shift\ncase $host in\n"
                f"  {NS_IP[0]}) ns={NS[0]} ;;\n  {NS_IP[1]}) ns={NS[1]} ;;\n"
                "  *) echo \"netns_rsh.sh: unknown host $host\" >&2; exit 1 ;;\nesac\n"
                "exec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n")
    os.chmod(agent, 0o755)
    return agent, ""


def netns_teardown():
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def netns_mpirun(work, agent, per_node, nodes=2):
    hosts = os.path.join(work, f"netns_hosts_{per_node}")
    with open(hosts, "w") as f:
        for ip in NS_IP:
            f.write(f"{ip} slots={per_node}\n")
    # TCP for every pair, also inside a namespace: the shared-memory transport would see both
    # namespaces as one host. The link between the namespaces is the only shaped one.
    return ["ip", "netns", "exec", NS[0], "mpirun", "--allow-run-as-root", "--hostfile", hosts,
            "-np", str(nodes * per_node), "--map-by", "node" if per_node == 1 else "slot",
            "--mca", "plm_rsh_agent", agent, "--mca", "btl", "self,tcp",
            "--mca", "btl_tcp_if_include", "10.99.7.0/24",
            "--mca", "oob_tcp_if_include", "10.99.7.0/24",
            "-x", "OPENBLAS_NUM_THREADS=1"] + (
                ["-x", "OPENBLAS_CORETYPE"] if os.environ.get("OPENBLAS_CORETYPE") else [])


def netns_configs():
    for model, (b, t) in NET_MODELS.items():
        for label, extra in (("full_shard", ["--strategy", "full_shard"]),
                             ("hybrid_shard G=2", ["--strategy", "hybrid_shard",
                                                   "--hybrid-group", "2"]),
                             ("no_shard", ["--strategy", "no_shard"])):
            yield model, label, ["--model", model, "--batch", str(b), "--seq", str(t), "--steps",
                                 str(STEPS), *extra]


def netns_spec(a, cache):
    """The MPI spec's compute figures with the two measured links: 2 nodes of 2 ranks."""
    spec = json.load(open(os.path.join(a.work, "this-machine-mpi.json")))
    spec["name"] = "two-netns"
    spec["source"] = ("two network namespaces on one host, a veth pair limited to " + NET_RATE +
                      " by tc tbf; intra_node measured inside one namespace, inter_node across "
                      "the pair, both by shardlab calibrate over MPI/TCP; compute as calibrated "
                      "for this machine")
    spec["nodes"], spec["ranks_per_node"] = 2, 2
    # Both namespaces run on this host's CPUs: each "node" has half of them.
    host_cpus = spec.get("devices_per_node", os.cpu_count() or 2)
    spec["devices_per_node"] = max(1, host_cpus // 2)
    spec.update(cache.data["netns/links"])
    out = os.path.join(a.work, "netns-cluster.json")
    with open(out, "w") as f:
        json.dump(spec, f, indent=1)
    return out


def stage_netns(a, cache):
    agent, why = netns_setup(a.work)
    if agent is None:
        print(f"netns: not possible here: {why}")
        cache.put("netns/unavailable", why)
        return
    shardlab = os.path.join(a.bin, "shardlab")
    try:
        with Locked("netns") as lk:
            # The links, each measured by calibrate over MPI/TCP: inside one namespace (2 ranks
            # there, TCP over its own address), across the pair with one rank in each ("alone"),
            # and across the pair with 2 ranks in each, both pairs (0, 2) and (1, 3) crossing at
            # once (--link-groups 2): the share of the one veth a rank gets while the other rank
            # of its namespace crosses too, as in every collective of a 2 x 2 training step. The
            # spec takes that one: the simulator's inter_node bandwidth is per rank, and the
            # namespaces have one link each, not one per rank.
            specs = {}
            for where, per_node, nodes, extra in (("intra", 2, 1, []), ("inter-alone", 1, 2, []),
                                                  ("inter", 2, 2, ["--link-groups", "2"])):
                out = os.path.join(a.work, f"netns-{where}.json")
                cmd = netns_mpirun(a.work, agent, per_node, nodes) + [
                    shardlab, "calibrate", "--ranks", str(per_node * nodes), "--backend", "mpi",
                    *extra, "--out", out]
                p = run(cmd)
                print(p.stderr, end="")
                specs[where] = json.load(open(out))
            links = {"intra_node": specs["intra"]["intra_node"],
                     "inter_node": specs["inter"]["inter_node"]}
            cache.put("netns/links", links)
            cache.put("netns/link_alone", specs["inter-alone"]["inter_node"])
            runs = os.path.join(a.work, "runs")
            os.makedirs(runs, exist_ok=True)
            for model, label, opts in netns_configs():
                real = os.path.join(runs, f"netns-{model}-{label.split()[0]}")
                run(netns_mpirun(a.work, agent, 2) + [shardlab, "train", "--backend", "mpi",
                                                      *opts, "--run-dir", real, "--overwrite"])
                m = median_step_ms(real)
                print(f"  netns {model} {label}: measured {m:.1f} ms", flush=True)
                cache.put(f"netns/{model}/{label}", {"measured_ms": m})
        cache.put("netns/load", [lk.load_before, lk.load_after])
    finally:
        netns_teardown()


def stage_cpuspeed(a, cache):
    """bench_cpu_speed: each CPU's sgemm rate in 100 ms windows, one CPU alone and all at once
    (docs/simulate-validation.md, "Local full_shard at N = 2: ranks in lockstep ...")."""
    out = os.path.join(a.work, "cpu-speed.json")
    cmd = [os.path.join(a.bin, "bench_cpu_speed"), "--benchmark_format=json",
           f"--benchmark_out={out}", "--benchmark_out_format=json"]
    with Locked("cpuspeed") as lk:
        run(cmd)
    # Each run is kept (the speeds move from one minute to the next): one row per run and CPUs.
    when = time.strftime("%H:%M", time.gmtime(lk.t0))
    for b in json.load(open(out))["benchmarks"]:
        cpus = int(b["name"].split("cpus:")[1].split("/")[0])
        keys = ("best_GFLOPs", "median_GFLOPs", "fast_fraction", "all_fast_fraction",
                "lockstep_GFLOPs")
        row = {k: b[k] for k in keys}
        row.update(when=when, load=[lk.load_before, lk.load_after])
        cache.put(f"cpuspeed/run/{when}/{cpus}", row)
        print(f"  {cpus} CPU(s): " + ", ".join(f"{k} {b[k]:.2f}" for k in keys), flush=True)
    cache.put("cpuspeed/command", "build/bin/bench_cpu_speed")


def span_phases(run_dir):
    """Per step, the time of each (lane, op, root|block) span summed; the median over the steps
    after the first. And the median step time."""
    events = [json.loads(line) for line in open(os.path.join(run_dir, "rank0.jsonl"))]
    ends = [e["t"] for e in events if e["kind"] == "step"]
    per = {}
    for e in events:
        if e["kind"] != "span":
            continue
        step = next((i for i, t in enumerate(ends) if e["t_end"] <= t), None)
        if step is None or step == 0:
            continue
        unit = e.get("unit", -1)
        key = (e["lane"], e["op"], "root" if unit == 0 else ("blocks" if unit > 0 else "all"))
        per.setdefault(key, {}).setdefault(step, 0.0)
        per[key][step] += (e["t_end"] - e["t_start"]) / 1e6
    return {k: statistics.median(v.values()) for k, v in per.items()}, median_step_ms(run_dir)


def stage_phases(a, model, backend, n, strategy, pf):
    """One configuration's spans, measured against simulated (the runs of the steps and predict
    stages). `phases netns MODEL STRATEGY`: a run of the netns stage."""
    if model == "netns":
        real = os.path.join(a.work, "runs", f"netns-{backend}-{n}")
        title = f"netns {backend} {n} (2 namespaces x 2 MPI ranks)"
    else:
        real = os.path.join(a.work, "runs", run_name(model, backend, int(n), strategy, int(pf)))
        title = f"{model} {backend} N={n} {strategy} prefetch {pf}"
    (m, m_step), (p, p_step) = span_phases(real), span_phases(real + "-sim")
    print(f"{title}: ms per step (median)\n")
    print("| lane | span | units | measured | predicted | predicted / measured |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in sorted(set(m) | set(p)):
        mv, pv = m.get(k, 0.0), p.get(k, 0.0)
        ratio = f"{pv / mv:.2f}" if mv > 0 else "-"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {mv:.1f} | {pv:.1f} | {ratio} |")
    print(f"| step | | | {m_step:.1f} | {p_step:.1f} | {p_step / m_step:.2f} |")
    rows = rank_steps(real)
    if len(rows) > 1:
        print("\nmeasured, each step after the first: step ms / compute spans ms / ms waiting in "
              "collectives for the last rank to arrive (the local backend's rendezvous `wait`; "
              "0 under MPI, which does not measure it)\n")
        for r, steps in enumerate(rows):
            print(f"rank {r}: " + "  ".join(f"{t:.0f}/{c:.0f}/{w:.0f}" for t, c, w in steps))


def rank_steps(run_dir):
    """Per rank, per step after the first: (step ms, compute spans ms, rendezvous wait ms)."""
    out = []
    for r in range(64):
        path = os.path.join(run_dir, f"rank{r}.jsonl")
        if not os.path.exists(path):
            break
        events = [json.loads(line) for line in open(path)]
        ends = [e["t"] for e in events if e["kind"] == "step"]
        steps = []
        for i in range(1, len(ends)):
            spans = [e for e in events if e["kind"] == "span" and ends[i - 1] < e["t_end"] <= ends[i]]
            comp = sum(e["t_end"] - e["t_start"] for e in spans if e["lane"] == "compute")
            wait = sum(e.get("wait") or 0 for e in spans if e["lane"] == "comm")
            steps.append(((ends[i] - ends[i - 1]) / 1e6, comp / 1e6, wait / 1e6))
        out.append(steps)
    return out


def fmt_bytes(n):
    if n >= 1 << 20:
        return f"{n / (1 << 20):.3g} MiB"
    return f"{n / (1 << 10):.3g} KiB"


def spec_fits(work, backend):
    """The calibrated spec's per-collective regimes, one clause per collective."""
    path = coll_spec_path(work, backend)
    if not os.path.exists(path):
        return ""
    coll = json.load(open(path))["intra_node"].get("collectives", {})
    out = []
    for op in COLL_OPS:
        regs = coll.get(op)
        if regs is None:
            continue
        regs = regs if isinstance(regs, list) else [regs]
        parts = []
        for r in regs:
            bound = f" up to {fmt_bytes(r['up_to_bytes'])}" if "up_to_bytes" in r else ""
            parts.append(f"{r['latency_us']:.1f} us, {r['bandwidth_GBps']:.2f} GB/s{bound}")
        out.append(f"{op} " + "; ".join(parts))
    return " | ".join(out)


def report(a, cache):
    d = cache.data
    lines, within = [], []
    lines.append(f"Machine: {CORES} cores. Load average (1, 5, 15 min) before and after each locked "
                 "stage is in its heading.\n")
    for model in MODELS:
        b, t = MODELS[model]
        for backend in ("local", "mpi"):
            load = d.get(f"measured/{model}/{backend}/load")
            if not load:
                continue
            lockstep = ""
            spec = os.path.join(a.work, f"this-machine-{backend}-{model}.json")
            if os.path.exists(spec):
                e = json.load(open(spec)).get("efficiency", {})
                if "lockstep_compute_efficiency" in e:
                    lockstep = (f"; the spec's lockstep_compute_efficiency "
                                f"{e['lockstep_compute_efficiency']:.2f}, applied at N > 1")
            lines.append(f"**{model}, {backend}** (global batch {b} x {t} tokens, {STEPS} steps, "
                         f"median of the last {STEPS - 1}; N <= {CORES}: the median of "
                         f"{STEP_PASSES} passes' medians, the passes in turn over the stage's "
                         f"configurations; load {load[0]} -> {load[1]}{lockstep})\n")
            lines.append("| N | strategy | prefetch | measured ms | the passes, ms | predicted ms | "
                         "predicted / measured | without the lockstep figure |")
            lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for n in RANKS:
                for strategy in STRATEGIES:
                    for pf in PREFETCH:
                        k = f"{model}/{backend}/{n}/{strategy}/{pf}"
                        r, p = d.get("measured/" + k), d.get("predicted/" + k)
                        if not r or not p:
                            continue
                        ratio = p["ms"] / r["ms"]
                        tag = " (ranks share cores)" if n > CORES else ""
                        mark = "" if n > CORES or abs(ratio - 1) <= 0.15 else " **x**"
                        if n <= CORES:
                            within.append(mark == "")
                        q = d.get("predicted-no-lockstep/" + k)
                        without = f"{q['ms'] / r['ms']:.2f}" if q else "-"
                        passes = ", ".join(f"{x:.1f}" for x in r.get("passes", [r["ms"]]))
                        lines.append(f"| {n}{tag} | {strategy} | {pf} | {r['ms']:.1f} | "
                                     f"{passes} | {p['ms']:.1f} | {ratio:.2f}{mark} | {without} |")
            lines.append("")
    if within:
        lines.append(f"Within 15% (N <= {CORES} cores): {sum(within)} of {len(within)} "
                     "configurations (**x** marks the others).\n")
    for backend in ("local", "mpi"):
        load = d.get(f"coll/{backend}/load")
        if not load:
            continue
        rounds = d.get(f"coll/{backend}/rounds", 1)
        lines.append(f"**Collectives, {backend}, N = 2** (`{d.get(f'coll/{backend}/command')}`; "
                     f"load {load[0]} -> {load[1]}): {rounds} rounds of `shardlab calibrate` "
                     f"then bench_collectives ({COLL_REPS} repetitions, their median), "
                     "alternated in one turn of the lock; per cell the median over the rounds "
                     "of the predicted time over the median of the measured (measured per call; "
                     "the rounds' own ratios, lowest and highest)\n")
        fits = spec_fits(a.work, backend)
        if fits:
            lines.append(f"Fitted by `shardlab calibrate` in the first round "
                         f"({os.path.basename(coll_spec_path(a.work, backend))}, "
                         f"intra_node.collectives; alpha, beta and the buffers each regime "
                         f"serves): {fits}\n")
        lines.append("| size | " + " | ".join(COLL_OPS) + " |")
        lines.append("| --- |" + " --- |" * len(COLL_OPS))
        for s in COLL_SIZES:
            cells = []
            for op in COLL_OPS:
                r = d.get(f"coll/{backend}/{op}/{s}")
                if not r:
                    cells.append("-")
                    continue
                ratio = r["predicted_s"] / r["measured_s"]
                mark = "" if abs(ratio - 1) <= 0.20 else " **x**"
                spread = r.get("ratios", [])
                spread = f"; {min(spread):.2f}-{max(spread):.2f}" if len(spread) > 1 else ""
                cells.append(f"{ratio:.2f} ({1e6 * r['measured_s']:.0f} us{spread}){mark}")
            lines.append(f"| {fmt_bytes(s)} | " + " | ".join(cells) + " |")
        lines.append("")
    speed_runs = sorted(k for k in d if k.startswith("cpuspeed/run/"))
    if speed_runs:
        lines.append(f"**Each CPU's sgemm rate over time** (`{d['cpuspeed/command']}`, the "
                     "`cpuspeed` stage: 1024 x 768 x 256 on one thread pinned to each CPU, 10 s, "
                     "in 100 ms windows; one CPU alone, then all at once; each run of the stage "
                     "is a pair of rows)\n")
        lines.append("| run (UTC, load) | CPUs at once | best GFLOP/s | median GFLOP/s | windows "
                     "fast (>= 75% of best), per CPU | windows with every CPU fast | lockstep "
                     "GFLOP/s (slowest CPU per window) |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for k in speed_runs:
            r = d[k]
            lines.append(f"| {r['when']} ({r['load'][0].split()[0]}) | {k.split('/')[-1]} | "
                         f"{r['best_GFLOPs']:.0f} | {r['median_GFLOPs']:.0f} | "
                         f"{100 * r['fast_fraction']:.0f}% | {100 * r['all_fast_fraction']:.0f}% | "
                         f"{r['lockstep_GFLOPs']:.0f} |")
        lines.append("")
    if d.get("netns/unavailable"):
        lines.append(f"**Two namespaces over a slow link**: not possible here: "
                     f"{d['netns/unavailable']}\n")
    elif d.get("netns/load"):
        sp, load = d["netns/links"], d["netns/load"]
        lines.append(f"**Two namespaces over a {NET_RATE} veth, 2 MPI ranks in each** (4 ranks on "
                     f"{CORES} cores: ranks share cores; load {load[0]} -> {load[1]}). Links as "
                     f"calibrated: inside a namespace {sp['intra_node']['bandwidth_GBps']:.3f} GB/s, "
                     f"{sp['intra_node']['latency_us']:.1f} us; across, per rank while both ranks "
                     f"of a namespace cross (`--link-groups 2`), "
                     f"{sp['inter_node']['bandwidth_GBps']:.3f} GB/s, "
                     f"{sp['inter_node']['latency_us']:.1f} us" +
                     (f" (one rank alone: {d['netns/link_alone']['bandwidth_GBps']:.3f} GB/s)"
                      if d.get("netns/link_alone") else "") + ".\n")
        lines.append("| model | strategy | measured ms | predicted ms | predicted / measured |")
        lines.append("| --- | --- | --- | --- | --- |")
        for k, r in sorted(d.items()):
            parts = k.split("/")
            if len(parts) == 3 and parts[0] == "netns" and isinstance(r, dict) and \
                    "predicted_ms" in r:
                lines.append(f"| {parts[1]} | {parts[2]} | {r['measured_ms']:.1f} | "
                             f"{r['predicted_ms']:.1f} | {r['predicted_ms'] / r['measured_ms']:.2f} |")
        lines.append("")
    body = "\n".join(lines)
    text = open(a.out).read()
    begin, end = "<!-- figure:sim-validation:begin -->", "<!-- figure:sim-validation:end -->"
    if begin not in text or end not in text:
        sys.exit(f"sim_validate: {a.out} has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(head + begin + "\n" + body + end + tail)
    os.replace(tmp, a.out)
    print(body)
    print(f"wrote {a.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--work", default="build/sim-validate")
    ap.add_argument("--out", default="docs/simulate-validation.md")
    ap.add_argument("--no-lock", action="store_true",
                    help="the caller holds /tmp/shardlab-build.lock (flock LOCK python3 ...)")
    ap.add_argument("--rounds", type=int, default=COLL_ROUNDS,
                    help=f"collectives: rounds of calibrate then bench_collectives (default "
                         f"{COLL_ROUNDS})")
    ap.add_argument("stage", choices=["calibrate", "steps", "collectives", "netns", "cpuspeed",
                                      "predict", "phases", "report", "all"])
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds}: want 1 or more")
    Locked.take = not a.no_lock
    os.makedirs(a.work, exist_ok=True)
    if shutil.which("mpirun") is None:
        sys.exit("sim_validate: mpirun not on PATH (the MPI half needs it)")
    cache = Cache(os.path.join(a.work, "results.json"))
    if a.stage == "calibrate":
        stage_calibrate(a, cache)
    elif a.stage == "steps":
        if len(a.args) != 2 or a.args[0] not in MODELS or a.args[1] not in ("local", "mpi"):
            sys.exit("sim_validate: steps MODEL BACKEND (small|medium, local|mpi)")
        stage_steps(a, cache, *a.args)
    elif a.stage == "collectives":
        if len(a.args) != 1 or a.args[0] not in ("local", "mpi"):
            sys.exit("sim_validate: collectives BACKEND (local|mpi)")
        stage_collectives(a, cache, a.args[0])
    elif a.stage == "phases":
        if len(a.args) == 3 and a.args[0] == "netns":
            stage_phases(a, *a.args, None, None)
        elif len(a.args) != 5:
            sys.exit("sim_validate: phases MODEL BACKEND N STRATEGY PREFETCH, or phases netns "
                     "MODEL STRATEGY")
        else:
            stage_phases(a, *a.args)
    elif a.stage == "netns":
        stage_netns(a, cache)
    elif a.stage == "cpuspeed":
        stage_cpuspeed(a, cache)
    elif a.stage == "predict":
        stage_predict(a, cache)
    elif a.stage == "report":
        stage_predict(a, cache)
        report(a, cache)
    else:
        stage_calibrate(a, cache)
        for model in MODELS:
            for backend in ("local", "mpi"):
                stage_steps(a, cache, model, backend)
        for backend in ("local", "mpi"):
            stage_collectives(a, cache, backend)
        stage_netns(a, cache)
        stage_cpuspeed(a, cache)
        stage_predict(a, cache)
        report(a, cache)


if __name__ == "__main__":
    main()
