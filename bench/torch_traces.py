#!/usr/bin/env python3
"""torch.profiler traces of a small PyTorch training job, one per rank, as a user's own job would
leave them: DDP, FSDP1 or FSDP2 on gloo (CPU), N processes.

    build/peers-venv/bin/python bench/torch_traces.py --strategy fsdp2 --ranks 2 --out DIR
        [--steps 4] [--layers 4] [--width 256] [--batch 4] [--seq 64]

Each rank trains a stack of residual MLP blocks (one FSDP unit each under FSDP1/FSDP2) with
AdamW, profiled with record_shapes and profile_memory for --steps steps after one warm-up
step, and writes DIR/rank<R>.json (torch.profiler's Chrome trace: distributedInfo, ProfilerStep#N,
cpu_op and user_annotation spans, gloo spans on the worker threads, [memory] instants).
"""
import argparse
import os
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=["ddp", "fsdp1", "fsdp2"], default="fsdp2")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--port", type=int, default=29533)
    return p.parse_args()


def worker(rank, a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm = nn.LayerNorm(c)
            self.fc = nn.Linear(c, 4 * c)
            self.proj = nn.Linear(4 * c, c)

        def forward(self, x):
            return x + self.proj(torch.nn.functional.gelu(self.fc(self.norm(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(256, a.width)
            self.blocks = nn.ModuleList(Block(a.width) for _ in range(a.layers))
            self.head = nn.Linear(a.width, 256)

        def forward(self, t):
            x = self.embed(t)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    net = Net()
    if a.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(net)
    elif a.strategy == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        net = FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                       device_id=torch.device("cpu"))
    else:
        from torch.distributed.fsdp import fully_shard
        for b in net.blocks:
            fully_shard(b)
        fully_shard(net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + rank)

    def step():
        t = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen)
        logits = net(t[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256), t[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()

    from torch.profiler import ProfilerActivity, profile, schedule
    path = os.path.join(a.out, "rank%d.json" % rank)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=a.steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(1 + a.steps):
            step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main():
    a = parse_args()
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        print("torch_traces.py: needs PyTorch (%s): make bench-peers installs it into "
              "build/peers-venv" % e)
        return 77
    os.makedirs(a.out, exist_ok=True)
    mp.spawn(worker, args=(a,), nprocs=a.ranks, join=True)
    print("torch_traces.py: %s on %d ranks: %s" % (a.strategy, a.ranks,
          ", ".join(sorted(os.listdir(a.out)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
