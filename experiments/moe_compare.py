"""Mixtral-8x7B: the estimate that reads it as dense vs the mixture-of-experts estimate (issue 15).

Run: python experiments/moe_compare.py [--model mixtral-8x7b] [--seq-len 4096]

For each cluster it ranks the same strategy space three ways and prints the best plan's step time,
memory per GPU and throughput:
- "read as dense": what paradvisor did before it knew experts — the config's FFN width per layer
  (one expert's compute: the step time of Mistral-7B) with the memory of all 46.7B parameters;
- "dense 46.7B": a dense model of the same size (every parameter used by every token);
- "MoE": top-2 of 8 experts (12.9B active parameters per token), expert parallelism in the search
  (the best EP plan is printed too; EP plans are plan-only until the launcher runs them), with the
  capacity-factor assumption stated by the estimate.
Each row is the best plan the launcher can run (spec/capability.py), as `recommend` ranks; a faster
plan-only plan (TP for Mixtral, EP) is printed under it.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))
os.environ.setdefault("PARADVISOR_CALIBRATION", "none")

from paradvisor.hardware.cluster import load_cluster, single_node_cluster
from paradvisor.model.load import load_profile
from paradvisor.spec.capability import family_of, why_not
from paradvisor.plan.evaluate import evaluate
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.search import choose_precision
from paradvisor.plan.space import candidates
from paradvisor.spec.plan import Workload

GiB = 2**30


def ranked(mf, cluster, wl):
    """(runnable plans that fit, plan-only plans that fit, candidates), each list fastest first; runnable
    as the launcher's capability table says (spec/capability.py), as `recommend` ranks them."""
    topo = Topology.of(cluster)
    precision = choose_precision(cluster, wl.precision)
    est = [evaluate(mf, topo, wl, p, precision, 0.10) for p in candidates(mf, topo, wl, precision)]
    fits = sorted((e for e in est if e.fits), key=lambda e: (e.score, e.memory_total))
    family = family_of(mf.profile)
    return (
        [e for e in fits if not why_not(e.plan, family)],
        [e for e in fits if why_not(e.plan, family)],
        len(est),
    )


def row(label, e, n, active):
    if e is None:
        return f"{label:34s} {'nothing fits':>12s} {'':>9s} {'':>11s} {n:6d}"
    t = {k: v for k, v in e.time.items() if k != "dp_comm_total" and v > 0}
    top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(t.items(), key=lambda kv: -kv[1])[:3])
    return (
        f"{label:34s} {e.step_time:10.2f} s {e.memory_total / GiB:7.1f} GiB {e.tokens_per_s:9,.0f} tok/s "
        f"{n:6d}  {e.plan.label()} (ckpt {e.plan.checkpointing}, mb {e.plan.micro_batch}); {top}; "
        f"active {active / 1e9:.1f}B"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mixtral-8x7b")
    ap.add_argument("--seq-len", type=int, default=4096)
    args = ap.parse_args()
    prof = load_profile(args.model)
    s = prof.transformer
    clusters = [
        single_node_cluster("H100 SXM", 8),
        load_cluster(os.path.join(REPO, "examples", "clusters", "h100-4x8-infiniband.toml")),
        single_node_cluster("A100 80GB", 8),
        load_cluster(os.path.join(REPO, "examples", "clusters", "a100-8x8-ethernet.toml")),
    ]
    moe = ModelFacts.of(prof)
    as_dense = ModelFacts.of(prof, moe=False)
    all_active = replace(as_dense, compute_shape=replace(s, ffn=s.num_experts * s.expert_ffn + s.shared_ffn))
    print(
        f"{prof.name}: {prof.total_params / 1e9:.1f}B parameters, {prof.active_params / 1e9:.1f}B active per "
        f"token (top-{s.experts_per_token} of {s.num_experts} experts); seq {args.seq_len}, global batch 8 per GPU"
    )
    print(f"{'estimate':34s} {'step':>12s} {'GiB/GPU':>11s} {'throughput':>15s} {'plans':>6s}  best plan")
    for cluster in clusters:
        wl = Workload(model=args.model, seq_len=args.seq_len, global_batch=8 * cluster.gpu_count)
        print(f"-- {cluster.name} ({cluster.gpu_count} GPUs)")
        for label, mf, active in (
            ("read as dense (before issue 15)", as_dense, prof.total_params),
            ("dense 46.7B (all parameters active)", all_active, prof.total_params),
            ("MoE (top-k, EP in the search)", moe, prof.active_params),
        ):
            runnable, plan_only, n = ranked(mf, cluster, wl)
            print(row(label, runnable[0] if runnable else None, n, active))
            if mf is moe:
                if plan_only and (not runnable or plan_only[0].step_time < runnable[0].step_time):
                    print(row("  faster, plan only", plan_only[0], len(plan_only), active))
                ep = [e for e in plan_only if e.plan.ep > 1]
                print(row("  best EP plan (plan only)", ep[0] if ep else None, len(ep), active))
        print()
    print(
        "MoE assumption:", moe and __import__("paradvisor.estimate.moe", fromlist=["ASSUMPTION"]).ASSUMPTION
    )


if __name__ == "__main__":
    main()
