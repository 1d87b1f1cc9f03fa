#!/usr/bin/env python3
"""Assembles docs/lessons/table.md from the JSON files the lessons write with --json.

Usage: lessons_table.py COMMAND FILE.json...   (COMMAND: how the files were made, for the page)
Every number is rank 0's measurement; the lessons themselves check that every rank agrees with the
formulas. Plain Python, no packages.
"""
import json
import sys


def mib(n):
    return f"{n / 2**20:.2f}"


def memory(d, label, when):
    for row in d["memory"]:
        if row["label"] == label and row["when"] == when:
            return row
    raise KeyError(f"lesson {d['lesson']}: no memory row {label} ({when})")


def sent_of(d):
    """Sent per rank in the last step, all collectives together (rank 0)."""
    return sum(c["measured"][0] for c in d["comm"])


def main():
    command, files = sys.argv[1], sys.argv[2:]
    runs = sorted((json.load(open(f)) for f in files), key=lambda d: d["lesson"])
    first = runs[0]
    same = all(d["model"] == first["model"] and d["ranks"] == first["ranks"] and
               d["steps"] == first["steps"] for d in runs)
    if not same:
        sys.exit("lessons_table: the runs differ in model, ranks or steps")
    dp = memory(first, "persistent total", "kept")["measured"][0]
    dp_sent, dp_buffer = sent_of(first), first["buffer"][0]
    out = [
        "# The five lessons side by side",
        "",
        f"Model `{first['model']}` ({first['params']:,} parameters), N = {first['ranks']} ranks "
        f"(lesson 5: G = {runs[-1]['group']}), {first['steps']} steps, local backend. "
        f"Made by `{command}`; every number is measured (rank 0; the lessons check that every "
        "rank equals the formula exactly). MiB = 2^20 bytes.",
        "",
        "| lesson | kept per rank: formula | kept per rank, MiB | vs lesson 1 | peak per rank, MiB "
        "| gathered params peak, MiB | sent per rank per step, MiB (vs lesson 1) "
        "| of which in collectives spanning groups | buffer per step, MiB (vs lesson 1) "
        "| loss at the last step | checks |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for d in runs:
        kept = memory(d, "persistent total", "kept")
        peak = memory(d, "total", "peak")["measured"][0]
        gathered = memory(d, "params_unsharded", "peak")["measured"][0]
        sent = sent_of(d)
        buffer = d["buffer"][0]
        # Lessons 1-4 run every collective over all N ranks; lesson 5 only its all-reduce.
        across = [c for c in d["comm"] if "across" in c["key"]]
        spanning = sum(c["measured"][0] for c in across) if across else sent
        checks = d["checks"]
        passed = sum(1 for c in checks if c["ok"])
        out.append(
            f"| {d['lesson']} {d['title']} | {kept['formula']} | {mib(kept['measured'][0])} | "
            f"{kept['measured'][0] / dp:.2f}× | {mib(peak)} | {mib(gathered)} | "
            f"{mib(sent)} ({sent / dp_sent:.2f}×) | {mib(spanning)} | "
            f"{mib(buffer)} ({buffer / dp_buffer:.2f}×) | {d['losses'][-1]:.4f} | "
            f"{passed}/{len(checks)} passed |")
    out += [
        "",
        "Ψ is the parameter count and Ψ' the count after padding each unit to a multiple of the "
        "shard group (each lesson prints both). *Kept* is what a rank holds between steps "
        "(parameters, gradients, Adam state); *peak* adds what a step needs for a while: "
        "activations, the gathered unit, the unit's full gradient, communication staging. *Sent per "
        "rank* is ring traffic per rank and *buffer* the collectives' full size (nccl-tests' "
        "convention), both as `core/comm/traffic.hpp` counts them: full sharding sends 1.5× what "
        "DDP sends per rank (3Ψ'(N−1)/N against 2Ψ(N−1)/N elements) over 3× the buffer (3Ψ' "
        "against Ψ). Lessons 1 to 4 run every collective over "
        "all N ranks, so all of it spans both groups of lesson 5's mesh, while lesson 5 sends only "
        "its gradient-shard all-reduce across groups.",
        "",
        "Loss: lessons 1 to 4 train bit for bit the same model (the local backend sums in rank order "
        "in all-reduce and reduce-scatter alike); lesson 5 averages within a group and then across "
        "groups, a different order of the same sum, so it agrees within rounding.",
    ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
