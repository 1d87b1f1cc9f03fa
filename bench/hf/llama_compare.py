#!/usr/bin/env python3
"""ShardLab's Llama against Hugging Face transformers' LlamaForCausalLM, trained from the same
weights on the same tokens.

    build/peers-venv/bin/python bench/hf/llama_compare.py --bin build/bin --work DIR
        [--steps 5] [--ranks 2] [--strategy full_shard] [--attention naive]

1. transformers makes a random LlamaForCausalLM (llama-tiny's shape: V 256, C 64, L 2, 4 query
   heads, 2 key/value heads, SwiGLU 176, untied head; fp32) and save_pretrained()s it.
2. `shardlab train --hf-config DIR --init-from DIR` trains it on a token file of exactly one
   global batch (B x T + 1 tokens: B windows, so every step is the whole file, in an order that
   does not change the mean loss), AdamW at a constant rate, no decay or clipping; then
   `shardlab export --hf-dir` writes its parameters as a save_pretrained directory.
3. PyTorch trains the same model on the same batch with torch.optim.AdamW (same betas, eps).
4. Compared: the loss of every step, and every parameter after the last step, by name; and the
   exported directory loads with from_pretrained (config.json and names as transformers reads
   them). Exit 0 when all agree within --tol (1e-5), 1 otherwise, 77 when transformers is absent
   (ctest counts that as skipped).
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

SKIP = 77


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="the build's bin/ (its shardlab)")
    p.add_argument("--work", required=True, help="a scratch directory (replaced)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--strategy", default="full_shard")
    p.add_argument("--attention", default="naive", choices=["naive", "flash"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--tol", type=float, default=1e-5)
    return p.parse_args()


def write_token_file(path, tokens):
    """llm.c's token shard: a 256 x int32 header (magic 20240520, version 1, count), uint16s."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def step_losses(run_dir):
    losses = {}
    with open(os.path.join(run_dir, "rank0.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("kind") == "step":
                losses[e["step"]] = e["loss"]
    return [losses[k] for k in sorted(losses)]


def main():
    a = parse_args()
    try:
        import torch
        import transformers
        from safetensors.torch import load_file
    except ImportError as e:
        print("llama_compare.py: skipped: %s (make bench-peers installs PyTorch and transformers "
              "into build/peers-venv)" % e)
        return SKIP
    torch.manual_seed(0)
    torch.set_num_threads(1)
    shardlab = os.path.join(os.path.abspath(a.bin), "shardlab")
    if not os.access(shardlab, os.X_OK):
        sys.exit("llama_compare.py: %s is not an executable" % shardlab)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    init, data = os.path.join(a.work, "init"), os.path.join(a.work, "tokens.bin")

    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False, hidden_act="silu", torch_dtype="float32")
    model = transformers.LlamaForCausalLM(cfg).float()
    model.config._attn_implementation = "eager"
    model.save_pretrained(init)
    B, T = a.batch, a.seq
    tokens = torch.randint(0, cfg.vocab_size, (B * T + 1,), generator=torch.Generator().manual_seed(1))
    write_token_file(data, tokens.tolist())

    # ---- ShardLab
    run_dir, ckpt, out = (os.path.join(a.work, n) for n in ("run", "ckpt", "exported"))
    cmd = [shardlab, "train", "--hf-config", init, "--init-from", init, "--data", data,
           "--batch", str(B), "--seq", str(T), "--steps", str(a.steps), "--lr", str(a.lr),
           "--warmup", "0", "--schedule", "constant", "--weight-decay", "0", "--beta1", "0.9",
           "--beta2", "0.95", "--eps", "1e-8", "--ranks", str(a.ranks), "--strategy",
           a.strategy, "--attention", a.attention, "--run-dir", run_dir, "--ckpt-dir", ckpt,
           "--save-every", str(a.steps)]
    print("$ " + " ".join(c.replace(a.work, "$WORK") for c in cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([shardlab, "export", ckpt, out, "--hf-dir"], check=True,
                   stdout=subprocess.DEVNULL)
    ours = step_losses(run_dir)

    # ---- transformers
    x = tokens[:-1].view(B, T)
    y = tokens[1:].view(B, T)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    theirs = []
    for _ in range(a.steps):
        opt.zero_grad()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, cfg.vocab_size), y.reshape(-1))
        loss.backward()
        opt.step()
        theirs.append(loss.item())

    # ---- compare
    failures = []
    print("step  shardlab      transformers  |diff|")
    for i, (s, t) in enumerate(zip(ours, theirs)):
        print("%4d  %.9f  %.9f   %.2e" % (i + 1, s, t, abs(s - t)))
        if abs(s - t) > a.tol:
            failures.append("step %d: loss %.9f vs %.9f" % (i + 1, s, t))
    if len(ours) != a.steps:
        failures.append("shardlab logged %d steps, not %d" % (len(ours), a.steps))
    exported = load_file(os.path.join(out, "model.safetensors"))
    state = {k: v.detach() for k, v in model.state_dict().items()}
    worst, worst_name = 0.0, ""
    for name, v in state.items():
        if name not in exported:
            failures.append("%s: not in the export" % name)
            continue
        d = (exported[name] - v).abs().max().item()
        if d > worst:
            worst, worst_name = d, name
    extra = sorted(set(exported) - set(state))
    if extra:
        failures.append("exported tensors transformers does not have: %s" % ", ".join(extra))
    print("parameters after step %d: %d tensors, max |diff| %.2e (%s)"
          % (a.steps, len(state), worst, worst_name))
    if worst > a.tol:
        failures.append("parameters differ by %.2e (%s)" % (worst, worst_name))
    # The export is a save_pretrained directory transformers loads.
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    if type(loaded).__name__ != "LlamaForCausalLM":
        failures.append("from_pretrained(export) made a %s" % type(loaded).__name__)
    print("from_pretrained($WORK/exported): %s, %d parameters"
          % (type(loaded).__name__,
             sum(p.numel() for p in loaded.parameters())))
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    for f in failures:
        print("FAIL: " + f)
    print("llama_compare.py: %s" % ("FAILED" if failures else "every loss and parameter within "
                                    "%g" % a.tol))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
