#!/usr/bin/env python3
"""PyTorch's GPT-2 step on one GPU, timed as bench/gpu/gpu_speed.sh times ShardLab's: the peer a
user would pick, at the same shape, in the same call on the same card.

    python3 bench/gpu/torch_gpt2_speed.py --batch 8 --seq 1024 --steps 12 --warmup 3 \\
        --modes eager-fp32,eager-bf16,compile-bf16 --out rows.json

The model is GPT-2 in plain torch with Hugging Face's shapes (ShardLab's `gpt2` preset: V 50257,
L 12, NH 12, C 768, T 1024; tanh GELU, LayerNorm eps 1e-5, head tied to wte, no dropout),
attention through scaled_dot_product_attention (PyTorch picks flash attention for bf16 and the
memory-efficient or math kernel for fp32). One step is forward, backward and AdamW on random
tokens (fresh each step). fp32 runs with torch's default matmul precision ("highest": no TF32),
as ShardLab's SGEMMs do; bf16 is torch.autocast(dtype=bfloat16) around forward and loss, fp32
master weights and optimizer state. A mode is `eager` or `compile` (torch.compile, default
options) and a precision.

Timing: --warmup untimed steps (compilation included), then --steps steps each between CUDA
events on the current stream, after a synchronize; the median is reported. Peak memory is
torch.cuda.max_memory_allocated() (what the caching allocator handed out) and
max_memory_reserved() (what it holds from the driver), reset after warm-up.

MFU = tokens/s * (6 N + 12 L C T) / peak, N the parameter count with the tied head counted once
(124,439,808), the peak --peak-fp32 (default 67e12, H100 SXM's non-tensor FP32) or --peak-bf16
(default 989e12, its dense BF16 tensor rate). One JSON row per mode to --out.
"""
import argparse
import json
import math
import statistics
import sys
import time


def build_model(torch, V, L, NH, C, T):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, Tn, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, Tn, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, Tn, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    return GPT()


def run_mode(torch, args, mode):
    how, prec = mode.split("-")
    torch.manual_seed(1337)
    dev = torch.device("cuda")
    V, L, NH, C, T = 50257, 12, 12, 768, 1024
    model = build_model(torch, V, L, NH, C, T).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0, fused=True)
    fwd = torch.compile(model) if how == "compile" else model
    B, S = args.batch, args.seq

    def step():
        idx = torch.randint(0, V, (B, S), device=dev)
        tgt = torch.randint(0, V, (B, S), device=dev)
        if prec == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(idx, tgt)
        else:
            loss = fwd(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        loss = step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    med = statistics.median(times)
    tok_s = B * S / med
    flops_tok = 6 * n_params + 12 * L * C * S
    peak = args.peak_bf16 if prec == "bf16" else args.peak_fp32
    row = {
        "name": f"pytorch/{mode}", "impl": "pytorch " + torch.__version__, "mode": how,
        "precision": prec, "batch": B, "seq": S, "params": n_params,
        "step_s_median": med, "step_s_min": min(times), "step_s_max": max(times),
        "tokens_per_s": tok_s, "flops_per_token": flops_tok, "peak_flops": peak,
        "mfu": tok_s * flops_tok / peak,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "warmup_s": warm_s, "final_loss": float(loss),
    }
    del model, opt, fwd
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager-fp32,eager-bf16,compile-bf16")
    ap.add_argument("--peak-fp32", type=float, default=67e12)
    ap.add_argument("--peak-bf16", type=float, default=989e12)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_gpt2_speed.py: PyTorch is not installed: skipped", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_gpt2_speed.py: no CUDA device", file=sys.stderr)
        return 2
    rows = []
    for mode in args.modes.split(","):
        if mode.split("-")[0] not in ("eager", "compile") or not mode.endswith(("fp32", "bf16")):
            print(f"torch_gpt2_speed.py: mode '{mode}': expected eager|compile-fp32|bf16",
                  file=sys.stderr)
            return 2
        try:
            r = run_mode(torch, args, mode)
        except Exception as e:  # one mode failing (e.g. a compiler error) keeps the others
            r = {"name": f"pytorch/{mode}", "error": f"{type(e).__name__}: {e}"[:400]}
        rows.append(r)
        if "error" in r:
            print(f"{r['name']:24s} FAILED {r['error']}", flush=True)
        else:
            print(f"{r['name']:24s} {r['tokens_per_s']:10.0f} tok/s  step {r['step_s_median']*1e3:8.1f} ms"
                  f"  MFU {100*r['mfu']:5.1f}%  peak alloc {r['peak_allocated_bytes']/2**30:6.2f} GiB"
                  f"  reserved {r['peak_reserved_bytes']/2**30:6.2f} GiB  loss {r['final_loss']:.3f}",
                  flush=True)
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
