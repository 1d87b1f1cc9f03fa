#!/usr/bin/env python3
"""PyTorch beside ShardLab: the same GPT-2, the same weights, batches and optimizer, trained by
PyTorch DDP or FSDP2 on gloo, one process per rank (bench/peers/run_peers.py drives it).

    build/peers-venv/bin/python bench/peers/torch_peer.py --weights W.safetensors --data D.bin \\
        --strategy ddp|fsdp2 --ranks 2 --batch 4 --seq 128 --warmup 2 --steps 20 \\
        --check RUN_DIR --out ROW.json

The model has the shape the safetensors file's metadata names (`shardlab.model_config`, written by
`shardlab export`) and is loaded from that file: --impl plain (default) is GPT-2 written in plain
torch with Hugging Face's names and layouts, scaled_dot_product_attention; --impl hf is
transformers' GPT2LMHeadModel. Both: tanh GELU, LayerNorm eps 1e-5, no dropout, the head tied to
wte. FSDP2 is `fully_shard` on every block, then on the
root. Each rank reads its rows of the same global batches as ShardLab's DataLoader
(core/train/data_loader.cpp: windows of T + 1 tokens, a Fisher-Yates order per epoch from
SplitMix64(seed, epoch), rank r takes rows [r B, (r + 1) B) of each global batch). With --check,
the world-mean loss of each of the first --check-steps steps must equal the loss the ShardLab run
in RUN_DIR recorded on the same rank (rank<r>.jsonl) within --tol, or the run fails.

Each rank's process runs on a CPU of its own (--bind core, the default: CPU r of the ones this
process may use, when 2 or more ranks fit), as ShardLab binds its local ranks' threads and mpirun
its MPI processes; --bind none (or SHARDLAB_BIND_TO=none) leaves them to the scheduler, as torchrun
does. Unbound, FSDP2's step here was 3 to 11% longer.

Timing as bench_train_step: --warmup untimed steps, then --steps steps, each started on every rank
together (a barrier) and lasting until the slowest rank has finished it (the max over ranks); the
median is reported. Peak RSS is each process's VmHWM (/proc/self/status), the largest over ranks.
Rank 0 writes one Google-Benchmark-like JSON row to --out.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

M64 = (1 << 64) - 1
TOKEN_FILE_MAGIC = 20240520


# ---- the batches of ShardLab's DataLoader ------------------------------------------------------

class SplitMix64:
    """core/train/rng.hpp's SplitMix64, bit for bit."""

    def __init__(self, seed):
        self.state = seed & M64

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def mix_seed(a, b):
    return SplitMix64(a ^ ((b * 0xD1342543DE82EF95 + 0x2545F4914F6CDD1D) & M64)).next_u64()


def read_token_file(path):
    """An llm.c .bin shard: 256 int32 of header (magic, version, count), then uint16 tokens."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 1024:
        raise RuntimeError("torch_peer: %s: shorter than a token file's header" % path)
    magic, version, count = (int.from_bytes(raw[4 * i:4 * i + 4], "little", signed=True)
                             for i in range(3))
    if magic != TOKEN_FILE_MAGIC or version != 1 or len(raw) != 1024 + 2 * count:
        raise RuntimeError("torch_peer: %s: not an llm.c token file (magic %d, version %d, %d "
                         "tokens in %d bytes)" % (path, magic, version, count, len(raw)))
    return [int.from_bytes(raw[1024 + 2 * i:1026 + 2 * i], "little") for i in range(count)]


class Loader:
    """This rank's rows of each global batch, in the order core/train/data_loader.cpp serves."""

    def __init__(self, tokens, batch, seq, rank, world, seed):
        self.tokens, self.batch, self.seq = tokens, batch, seq
        self.rank, self.world, self.seed = rank, world, seed
        self.windows = (len(tokens) - 1) // seq
        if self.windows < 1:
            raise RuntimeError("torch_peer: %d tokens, too few for one sequence of %d"
                             % (len(tokens), seq))
        self.position, self.perm_epoch, self.perm = 0, -1, []

    def window_start(self, g):
        e = g // self.windows
        if e != self.perm_epoch:
            perm = list(range(self.windows))
            rng = SplitMix64(mix_seed(self.seed, e))
            for i in range(self.windows - 1, 0, -1):
                j = rng.next_u64() % (i + 1)
                perm[i], perm[j] = perm[j], perm[i]
            self.perm, self.perm_epoch = perm, e
        return self.perm[g % self.windows] * self.seq

    def next(self):
        """(inputs, targets), each `batch` lists of `seq` tokens."""
        global_batch = self.batch * self.world
        first = self.position * global_batch + self.rank * self.batch
        xs, ys = [], []
        for j in range(self.batch):
            w = self.window_start(first + j)
            xs.append(self.tokens[w:w + self.seq])
            ys.append(self.tokens[w + 1:w + self.seq + 1])
        self.position += 1
        return xs, ys


# ---- ShardLab's losses ---------------------------------------------------------------------------

def shardlab_losses(run_dir, rank):
    """{step: loss} of the step events in RUN_DIR/rank<r>.jsonl (the world mean ShardLab prints)."""
    path = os.path.join(run_dir, "rank%d.jsonl" % rank)
    out = {}
    with open(path) as f:
        for line in f:
            if '"kind":"step"' in line:
                e = json.loads(line)
                out[e["step"]] = e["loss"]
    return out


def rss_peak_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ---- one rank ------------------------------------------------------------------------------------

def plain_gpt2(torch, m):
    """GPT-2 in plain torch (nanoGPT's shape of it), with Hugging Face's parameter names and
    Conv1D (in, out) layouts, so the safetensors file loads as it is: the peer without the
    transformers package (its import alone costs resident memory) or its wrappers."""
    nn, F = torch.nn, torch.nn.functional
    C, H = m["n_embd"], m["n_head"]

    class Conv1D(nn.Module):
        def __init__(self, nin, nout):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(nin, nout))
            self.bias = nn.Parameter(torch.zeros(nout))

        def forward(self, x):
            return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(
                *x.shape[:-1], -1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = Conv1D(C, 3 * C), Conv1D(C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2)
                       for t in self.c_attn(x).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.c_proj = Conv1D(C, 4 * C), Conv1D(4 * C, C)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(C, eps=1e-5), Attention()
            self.ln_2, self.mlp = nn.LayerNorm(C, eps=1e-5), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(m["vocab_size"], C)
            self.wpe = nn.Embedding(m["max_seq_len"], C)
            self.h = nn.ModuleList(Block() for _ in range(m["n_layer"]))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)

        def forward(self, idx):
            pos = torch.arange(idx.size(1), dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return F.linear(self.ln_f(x), self.wte.weight)  # the head tied to wte

    return GPT()


def build_model(torch, weights, impl):
    """(model, the blocks to fully_shard, a function from tokens to logits, the shape)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(weights, "pt") as f:
        meta = f.metadata() or {}
    if "shardlab.model_config" not in meta:
        raise RuntimeError("torch_peer: %s has no shardlab.model_config metadata (write it with "
                           "shardlab export)" % weights)
    m = json.loads(meta["shardlab.model_config"])
    if impl == "hf":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(vocab_size=m["vocab_size"], n_positions=m["max_seq_len"],
                         n_embd=m["n_embd"], n_layer=m["n_layer"], n_head=m["n_head"],
                         activation_function="gelu_new", layer_norm_epsilon=1e-5,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None)
        model = GPT2LMHeadModel(cfg)
        body, blocks = model.transformer, model.transformer.h
        head = model.lm_head.weight
        def logits(net, x): return net(input_ids=x).logits  # noqa: E704
    else:
        model = plain_gpt2(torch, m)
        body, blocks, head = model, model.h, model.wte.weight
        def logits(net, x): return net(x)  # noqa: E704
    state = load_file(weights)
    own = body.state_dict()
    missing = sorted(set(own) - set(state))
    unused = sorted(set(state) - set(own))
    if missing or unused:
        raise RuntimeError("torch_peer: %s does not fit GPT2LMHeadModel(%s): missing %s, unused %s"
                         % (weights, m, missing, unused))
    for k, v in state.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise RuntimeError("torch_peer: %s: %s has shape %s, the model %s"
                             % (weights, k, tuple(v.shape), tuple(own[k].shape)))
    body.load_state_dict(state, strict=True)
    if head.data_ptr() != body.wte.weight.data_ptr():
        raise RuntimeError("torch_peer: the LM head is not tied to wte")
    return model, blocks, logits, m


def bind_rank(rank, ranks, how):
    """Puts this process (and every thread it starts later: gloo's, torch's) on CPU `rank` of the
    CPUs it may use, as ShardLab's plan_core_binding does for its rank threads: only with 2 or more
    ranks, and only if they all fit. Returns the CPU, or None when left to the scheduler."""
    if how != "core" or ranks < 2:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if ranks > len(cpus):
        return None
    os.sched_setaffinity(0, {cpus[rank]})
    return cpus[rank]


def rank_main(rank, a, port):
    os.environ["OMP_NUM_THREADS"] = "1"
    bind_rank(rank, a.ranks, a.bind)  # before torch starts any thread
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=a.ranks)
    try:
        model, blocks, logits_of, shape = build_model(torch, a.weights, a.impl)
        if a.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            net = DistributedDataParallel(model)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh("cpu", (a.ranks,))
            for block in blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            net = model
        kind = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[a.adamw]
        opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                                weight_decay=a.weight_decay, **kind)
        loader = Loader(read_token_file(a.data), a.batch, a.seq, rank, a.ranks, a.seed)
        vocab = shape["vocab_size"]

        prof = None
        if a.profile and rank == 0:
            from torch.profiler import ProfilerActivity, profile
            prof = profile(activities=[ProfilerActivity.CPU])
        losses, times, cpu = [], [], 0.0
        for s in range(a.warmup + a.steps):
            if prof and s == a.warmup:
                prof.start()
            xs, ys = loader.next()
            x, y = torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            logits = logits_of(net, x)
            loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
            loss.backward()
            opt.step()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            m = torch.tensor([loss.item() / a.ranks], dtype=torch.float64)
            dist.all_reduce(m)  # the world mean, as ShardLab's EngineStepper reports
            t = torch.tensor([dt], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the step lasts until the slowest rank
            losses.append(m.item())
            if s >= a.warmup:
                times.append(t.item())
                cpu += dc
        if prof:
            prof.stop()
            print("torch_peer: rank 0, %s, %d timed steps (times include the profiler's cost):\n%s"
                  % (a.strategy, a.steps, prof.key_averages().table(
                      sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=36)))

        worst = 0.0
        if a.check:
            ref = shardlab_losses(a.check, rank)
            for k in range(1, a.check_steps + 1):
                if k not in ref:
                    raise RuntimeError("torch_peer: rank %d: %s has no loss for step %d"
                                     % (rank, a.check, k))
                d = abs(losses[k - 1] - ref[k])
                worst = max(worst, d)
                if d > a.tol:
                    raise RuntimeError(
                        "torch_peer: rank %d: step %d: loss %.7f (PyTorch %s) but %.7f (ShardLab, "
                        "%s): |diff| %.2e > %.0e. The peer does not compute what ShardLab does."
                        % (rank, k, losses[k - 1], a.strategy, ref[k], a.check, d, a.tol))

        out = torch.tensor([float(rss_peak_bytes()), worst, cpu], dtype=torch.float64)
        mx = out.clone()
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
        cpu_all = out[2:].clone()
        dist.all_reduce(cpu_all)  # every rank's process: CPU time of the world
        if rank == 0:
            write_row(a, shape, model, times, losses, mx[0].item(), mx[1].item(),
                      cpu_all.item(), torch.__version__)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # The row is written: leave without the interpreter's teardown. torch 2.15's gloo threads
    # sometimes abort a rank there ("terminate called without an active exception", SIGABRT,
    # about one run in five here, also with a barrier before destroy_process_group), which
    # mp.spawn would report as this run failing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def write_row(a, shape, model, times, losses, rss, worst, cpu_s, version):
    med = statistics.median(times)
    tokens = a.ranks * a.batch * a.seq
    name = "peer/torch_%s/%s/%s/ranks:%d/batch:%d/seq:%d/manual_time" % (
        a.impl, a.strategy, a.preset, a.ranks, a.batch, a.seq)
    row = {
        "name": name, "run_name": name, "run_type": "iteration", "iterations": len(times),
        "real_time": 1e3 * med, "cpu_time": 1e3 * cpu_s / len(times), "time_unit": "ms",
        "tokens/s": tokens / med, "step_ms": 1e3 * sum(times) / len(times),
        "step_ms_median": 1e3 * med, "rss_peak": rss,
        "params": float(sum(p.numel() for p in model.parameters())),
        "loss_checked_steps": float(a.check_steps if a.check else 0),
        "loss_max_diff": worst, "loss_first": losses[0],
    }
    doc = {"context": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "library": "torch %s" % version, "model_config": shape,
                       "threads_per_rank": 1, "backend": "gloo", "bind": a.bind},
           "benchmarks": [row]}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("torch %s %s %s: median step %.1f ms, %.0f tokens/s, peak RSS %.1f MiB per rank%s"
          % (version, a.impl, a.strategy, 1e3 * med, tokens / med, rss / 2**20,
             ", first %d losses within %.1e of ShardLab's" % (a.check_steps, worst)
             if a.check else ""))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_bind():
    """SHARDLAB_BIND_TO's value, which turns ShardLab's own binding off too: core unless none."""
    return "none" if os.environ.get("SHARDLAB_BIND_TO") == "none" else "core"


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch DDP or FSDP2 (gloo, one process per rank) training ShardLab's GPT "
                    "from the same safetensors weights on the same batches.")
    p.add_argument("--weights", required=True, help="safetensors file from shardlab export")
    p.add_argument("--data", required=True, help="llm.c .bin token file (shardlab data encode)")
    p.add_argument("--strategy", required=True, choices=["ddp", "fsdp2"])
    p.add_argument("--impl", default="plain", choices=["plain", "hf"],
                   help="plain: GPT-2 in plain torch; hf: transformers' GPT2LMHeadModel")
    p.add_argument("--preset", default="small", help="the preset's name, for the row's name")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--seed", type=int, default=1337, help="ShardLab's --seed: the batch order")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--adamw", default="default", choices=["default", "foreach", "fused"],
                   help="torch.optim.AdamW's implementation (default: its choice, on CPU the "
                        "per-parameter loop)")
    p.add_argument("--bind", default=default_bind(), choices=["core", "none"],
                   help="core: each rank's process on a CPU of its own, as ShardLab's ranks; "
                        "none: left to the scheduler, as torchrun leaves them (default: core, or "
                        "none when SHARDLAB_BIND_TO=none)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--check", help="ShardLab run directory whose losses the first steps must match")
    p.add_argument("--check-steps", type=int, default=5)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--out", required=True, help="JSON file for the row")
    p.add_argument("--profile", action="store_true",
                   help="torch.profiler over rank 0's timed steps: print the top operators")
    a = p.parse_args(argv)
    for k in ("ranks", "batch", "seq", "steps"):
        if getattr(a, k) < 1:
            p.error("--%s must be at least 1" % k)
    if a.warmup < 0 or a.check_steps < 1 or a.check_steps > a.warmup + a.steps:
        p.error("--warmup must be >= 0 and --check-steps in [1, warmup + steps]")
    for f in (a.weights, a.data) + ((a.check,) if a.check else ()):
        if not os.path.exists(f):
            p.error("%s does not exist" % f)
    return a


def main():
    a = parse_args(sys.argv[1:])
    import torch.multiprocessing as mp
    try:
        mp.spawn(rank_main, args=(a, free_port()), nprocs=a.ranks, join=True)
    except mp.ProcessRaisedException as e:
        print("torch_peer: a rank failed:\n%s" % e, file=sys.stderr)
        return 1
    except mp.ProcessExitedException as e:
        print("torch_peer: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
