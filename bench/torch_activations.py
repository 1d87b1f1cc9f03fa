#!/usr/bin/env python3
"""Activations per token per transformer block in PyTorch, measured, for GPT-2's shapes under
torch.autocast: what ShardLab's bf16 + flash attention plan is compared with (docs/model.md,
"What a block saves").

    VENV/bin/python bench/torch_activations.py [--model gpt2] [--seq 1024] [--batches 1,2]
        [--layers 2] [--dtype bf16|f32] [--attention sdpa|math] [--json OUT.json]

VENV is a virtual environment with torch (make bench-peers makes build/peers-venv; any with torch
2.x works). Runs on the CPU, one thread, a few seconds at the default shapes.

What is measured: L GPT-2 blocks (pre-LayerNorm, the same modules as bench/peers/torch_peer.py's
plain GPT-2: LayerNorm eps 1e-5, tanh GELU, F.scaled_dot_product_attention causal) run forward
under torch.autocast("cpu", dtype) (nothing under --dtype f32) on an input that requires grad,
inside torch.profiler.profile(profile_memory=True). The bytes held at the end of forward are the
sum of the profile's allocations and frees (each op's own and the [memory] events). That includes
autocast's cached 16-bit copies of the weights, which do not grow with tokens; so the figure is
the slope over two batch sizes: (held(B2) - held(B1)) / ((B2 - B1) T L), per token per block. It
counts what each block keeps for backward (its input, the saved tensors of each op) and one
block output. A second count, from torch.autograd.graph.saved_tensors_hooks (the storages saved
for backward, parameters and their casts left out, plus each block's input), checks the first and
lists what is saved, tensor by tensor.

--attention math runs scaled_dot_product_attention on its math backend (the T x T probabilities
saved, as ShardLab's naive attention); sdpa lets PyTorch choose (on the CPU its flash kernel,
which saves the output and one logsumexp per row).
"""
import argparse
import json
import sys

SHAPES = {  # n_embd, n_head (bench/peers/torch_peer.py reads them from the safetensors file)
    "small": (256, 4),
    "medium": (512, 8),
    "gpt2": (768, 12),
    "gpt2-xl": (1600, 25),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2", choices=sorted(SHAPES))
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence T")
    p.add_argument("--batches", default="1,2", help="two batch sizes B1,B2 for the slope")
    p.add_argument("--layers", type=int, default=2, help="blocks L")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "math"])
    p.add_argument("--json", help="also write the result here")
    a = p.parse_args(argv)
    try:
        a.batches = [int(x) for x in a.batches.split(",")]
    except ValueError:
        p.error("--batches=%s: expected two integers, e.g. 1,2" % a.batches)
    if len(a.batches) != 2 or not 0 < a.batches[0] < a.batches[1]:
        p.error("--batches=%s: expected two increasing positive integers" % ",".join(map(str, a.batches)))
    if a.seq < 1 or a.layers < 1:
        p.error("--seq and --layers must be positive")
    return a


def blocks(torch, C, H, L):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
            self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2)
                       for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    return nn.ModuleList(Block() for _ in range(L))


def forward(torch, net, x, a):
    import contextlib
    ctx = contextlib.ExitStack()
    if a.dtype == "bf16":
        ctx.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    if a.attention == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx.enter_context(sdpa_kernel(SDPBackend.MATH))
    with ctx:
        y = x
        for b in net:
            y = b(y)
    return y


def held_by_profiler(torch, net, B, a, C):
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(B, a.seq, C, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y = forward(torch, net, x, a)
    held = 0
    for e in prof.events():
        held += e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
    del y
    return held


def saved_by_hooks(torch, net, B, a, C):
    """Bytes of the storages saved for backward (parameters and their autocast copies left out),
    plus each block's input; and the list of what was saved."""
    params = {p.untyped_storage().data_ptr() for p in net.parameters()}
    seen = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen[key] = (tuple(t.shape), str(t.dtype).replace("torch.", ""),
                         t.untyped_storage().nbytes())
        return t

    x = torch.randn(B, a.seq, C, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = forward(torch, net, x, a)
    del y
    # Autocast's weight copies have a parameter's shape and no batch dimension.
    shapes = {tuple(p.shape) for p in net.parameters()} | {tuple(p.shape[::-1]) for p in net.parameters()}
    kept = [(s, d, n) for k, (s, d, n) in seen.items() if k not in params and s not in shapes]
    return sum(n for _, _, n in kept), kept


def main(argv):
    a = parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("torch_activations.py: this Python has no torch; run it with a venv that has it "
                 "(make bench-peers makes build/peers-venv)")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    C, H = SHAPES[a.model]
    T, L = a.seq, a.layers
    net = blocks(torch, C, H, L)
    b1, b2 = a.batches
    h1, h2 = held_by_profiler(torch, net, b1, a, C), held_by_profiler(torch, net, b2, a, C)
    per_token_block = (h2 - h1) / ((b2 - b1) * T * L)
    s1, _ = saved_by_hooks(torch, net, b1, a, C)
    s2, listing = saved_by_hooks(torch, net, b2, a, C)
    hooks_per_token_block = (s2 - s1) / ((b2 - b1) * T * L)
    print("PyTorch %s, %s: torch.autocast(\"cpu\", %s), scaled_dot_product_attention (%s), "
          "C %d, %d heads, T %d, L %d, B %d and %d"
          % (torch.__version__, a.model, "bfloat16" if a.dtype == "bf16" else "none (fp32)",
             a.attention, C, H, T, L, b1, b2))
    print("  held after forward (profiler memory events): %d and %d bytes" % (h1, h2))
    print("  activations per token per block: %.1f bytes (%.3f C)" % (per_token_block, per_token_block / C))
    print("  saved for backward per token per block (saved_tensors_hooks): %.1f bytes" % hooks_per_token_block)
    print("  what one block saves at B %d (shape, dtype, bytes), besides its input:" % b2)
    for s, d, n in listing[: len(listing) // L]:
        print("    %-22s %-9s %d" % (s, d, n))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "model": a.model, "C": C, "n_head": H, "T": T,
                       "layers": L, "batches": a.batches, "dtype": a.dtype, "attention": a.attention,
                       "held_bytes": [h1, h2], "per_token_per_block": per_token_block,
                       "saved_per_token_per_block": hooks_per_token_block}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
