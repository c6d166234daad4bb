#!/usr/bin/env python3
"""The tables of message.sh, from its records.jsonl, service.jsonl and raw/:
every figure per round, the anchor of the same round beside it, and the
ratio per round (never a ratio of medians).

    python3 results/dht-bench/cross-host/message-table.py [DIR] > DIR/tables.md
"""
import json
import os
import statistics
import sys
from collections import defaultdict

d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "message")
recs = [json.loads(l) for l in open(os.path.join(d, "records.jsonl"))]
rounds = sorted({r["round"] for r in recs})


def by(section):
    """(row, system, phase) -> {round: record}"""
    out = defaultdict(dict)
    for r in recs:
        if r["section"] == section and r["phase"] != "failed":
            out[(r["row"], r["system"], r["phase"])][r["round"]] = r
    return out


def failed(section):
    return [r for r in recs if r["section"] == section and r["phase"] == "failed"]


def span(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f}" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}"


def head(cols):
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))


def note_failed(section):
    for f in failed(section):
        print(f"\nround {f['round']}: {f['row']} failed (see raw/).")


phase_order = ["paper/write", "paper/read", "paper/mixed", "a/load", "a/run", "b/load", "b/run", "c/load", "c/run"]

# --- cross
t = by("cross")
if t:
    print("## Two hosts over tcp;ofi_rxm, beside Redis in the same run\n")
    print("Per round: fabkit M ops/s / Redis M ops/s = **ratio**. `own`: the share of "
          "operations on the rank's own region; cpu: busy CPU of the job per operation, "
          "fabkit / Redis; srv: the owners' service threads per key served.\n")
    for row in sorted({k[0] for k in t}):
        print(f"### {row}\n")
        head(["phase"] + [f"round {r}" for r in rounds] + ["ratio range", "own", "cpu ns fabkit / Redis", "srv ns/key"])
        for ph in phase_order:
            f, rd = t.get((row, "fabkit", ph)), t.get((row, "redis", ph))
            if not f:
                continue
            cells, ratios = [], []
            for r in rounds:
                a, b = f.get(r), (rd or {}).get(r)
                if a and b:
                    ratio = a["mops"] / b["mops"]
                    ratios.append(ratio)
                    cells.append(f"{a['mops']:.3f} / {b['mops']:.3f} = **{ratio:.2f}**")
                elif a:
                    cells.append(f"{a['mops']:.3f} / -")
                else:
                    cells.append("-")
            own = span([x.get("own") for x in f.values()])
            cpu = f"{span([x.get('cpu_ns') for x in f.values()])} / {span([x.get('cpu_ns') for x in (rd or {}).values()])}"
            srv = span([x.get("srv_ns") for x in f.values()])
            path = next(iter(f.values())).get("path", "-")
            print(f"| {ph} ({path}) | " + " | ".join(cells) + f" | {span(ratios)} | {own} | {cpu} | {srv} |")
        print()
    note_failed("cross")

# --- mpi
t = by("mpi")
if t:
    print("## MPI across the same hosts (btl tcp), lock-free, paper\n")
    print("Per round: the message path over MPI point-to-point / MPI windows (osc pt2pt) = "
          "**ratio**; and the native message path (libfabric, cross n2-lockfree, same round) "
          "over the MPI message path.\n")
    native = by("cross")
    head(["phase"] + [f"round {r}: message / pt2pt" for r in rounds] + ["native / MPI message"])
    for ph in ["paper/write", "paper/read", "paper/mixed"]:
        m, w = t.get(("message", "fabkit", ph), {}), t.get(("rma-pt2pt", "fabkit", ph), {})
        n = native.get(("n2-lockfree", "fabkit", ph), {})
        cells, nat = [], []
        for r in rounds:
            if r in m and r in w:
                cells.append(f"{m[r]['mops']:.3f} / {w[r]['mops']:.4f} = **{m[r]['mops'] / w[r]['mops']:.0f}x**")
            else:
                cells.append("-")
            if r in m and r in n:
                nat.append(n[r]["mops"] / m[r]["mops"])
        print(f"| {ph} | " + " | ".join(cells) + f" | {span(nat)} |")
    print()
    note_failed("mpi")

# --- one node
t = by("one-node")
if t:
    print("## One node: libfabric shm, --path message, beside the public MPI-DHT (osc rdma)\n")
    print("Per round: fabkit M ops/s / MPI-DHT M ops/s = **ratio** (the MPI-DHT does one "
          "blocking operation at a time: it has no batch).\n")
    for b in ["b64", "b1"]:
        head(["phase, batch " + b[1:]] + [f"round {r}" for r in rounds] + ["ratio range"])
        for ph in ["paper/write", "paper/read", "paper/mixed"]:
            f = t.get((f"shm-message-{b}", "fabkit", ph), {})
            a = t.get(("mpidht", "mpidht", ph), {})
            cells, ratios = [], []
            for r in rounds:
                if r in f and r in a:
                    ratios.append(f[r]["mops"] / a[r]["mops"])
                    cells.append(f"{f[r]['mops']:.3f} / {a[r]['mops']:.3f} = **{ratios[-1]:.2f}**")
                else:
                    cells.append("-")
            print(f"| {ph} | " + " | ".join(cells) + f" | {span(ratios)} |")
        print()
    note_failed("one-node")

# --- slower
t = by("slower")
if t:
    print("## Nothing slower: this commit against the commit before the message path\n")
    print("Per round: new M ops/s / old M ops/s = **ratio**, run back to back in alternating "
          "order; the median ratio is the target's measure (within 5 %).\n")
    rows = sorted({k[0][: -len("-new")] for k in t if k[0].endswith("-new")})
    head(["row, phase"] + [f"round {r}" for r in rounds] + ["median ratio"])
    for row in rows:
        for ph in ["paper/write", "paper/read", "paper/mixed"]:
            n, o = t.get((row + "-new", "fabkit", ph), {}), t.get((row + "-old", "fabkit", ph), {})
            cells, ratios = [], []
            for r in rounds:
                if r in n and r in o:
                    ratios.append(n[r]["mops"] / o[r]["mops"])
                    cells.append(f"{n[r]['mops']:.3f} / {o[r]['mops']:.3f} = **{ratios[-1]:.2f}**")
                else:
                    cells.append("-")
            med = f"{statistics.median(ratios):.2f}" if ratios else "-"
            print(f"| {row} {ph} | " + " | ".join(cells) + f" | {med} |")
    print()
    note_failed("slower")

# --- service
p = os.path.join(d, "service.jsonl")
if os.path.exists(p):
    s = [json.loads(l) for l in open(p)]
    print("## The owner's service thread (dht/examples/service.rs, 1 s per part)\n")
    print("A peer's single reads while the owner computes (no DHT call), what an idle "
          "service costs, and its busy CPU per key served (batches of 64).\n")
    head(["provider", "reads while computing", "p50 µs", "p99 µs", "max µs", "idle service, % of a core", "service ns per key"])
    for x in s:
        c, o = x["owner_computing"], x["owner"]
        print(f"| {x['provider']} | {c.get('reads')} | {c.get('p50_us')} | {c.get('p99_us')} | "
              f"{c.get('max_us')} | {o['idle_service_core_percent']:.3f} | {o['service_ns_per_key']} |")
    print()
