"""`paradvisor hetero`: per-node allocation for heterogeneous (geo-distributed) nodes (003, Tables 2-3)."""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.units import half_up

# 003_f884a432a3fcd491.txt, Table 3: GPU idle time (s) per node and in total.
PAPER_IDLE = {
    "baseline": [1.1, 0.0, 14.6, 4.9],
    "A": [11.9, 0.0, 14.7, 13.8],
    "B": [6.8, 7.2, 0.0, 14.4],
    "C": [2.1, 0.0, 8.6, 1.9],
}


def add_parser(sub) -> None:
    p = sub.add_parser("hetero", help="per-node batch / local-step allocation for unlike nodes (003 Table 2)")
    p.add_argument("--cluster", required=True, metavar="FILE")
    p.add_argument("--base-batch", type=int, default=4, help="baseline batch per GPU (003: 4)")
    p.add_argument("--base-local-steps", type=int, default=100, help="baseline local steps H (003: 100)")
    p.add_argument(
        "--model", default="llama-150m", help="model for technique B's memory model (default llama-150m)"
    )
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--precision", default="fp16", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def compute(args):
    from paradvisor.hardware.cluster import load_cluster
    from paradvisor.hardware.types import Cluster
    from paradvisor.model.load import load_profile
    from paradvisor.plan.evaluate import evaluate
    from paradvisor.plan.facts import ModelFacts, Topology
    from paradvisor.plan.hetero import allocate
    from paradvisor.spec.plan import Plan, Workload

    if args.base_batch < 1 or args.base_local_steps < 1 or args.seq_len < 1:
        raise InputError("--base-batch, --base-local-steps and --seq-len must be at least 1")
    from paradvisor.hardware import calibration

    cluster = calibration.apply(
        load_cluster(args.cluster)
    )  # measured speeds where `calibrate` ran on the GPU
    nodes = [n for n in cluster.online_nodes if n.gpus]
    if not nodes:
        raise InputError("the cluster has no node with GPUs", where=args.cluster)
    prof = load_profile(args.model)
    mf = ModelFacts.of(prof)
    wl = Workload(args.model, seq_len=args.seq_len, global_batch=args.base_batch, precision=args.precision)

    def inner(node, batch):
        topo = Topology.of(Cluster(name=node.name, nodes=(node,)))
        plan = Plan(dp=node.gpu_count, micro_batch=batch, precision=args.precision)
        from dataclasses import replace

        return evaluate(
            mf, topo, replace(wl, global_batch=batch * node.gpu_count), plan, args.precision, 0.10
        )

    speeds = allocate(
        nodes,
        precision=args.precision,
        base_batch=args.base_batch,
        base_local_steps=args.base_local_steps,
        fits=lambda n, b: inner(n, b).fits,
        max_batch=1024,
    )

    # Predicted idle per technique: each node's busy time per round, the round lasts as long as the slowest.
    def idle(batches, steps):
        busy = [h * inner(n, b).step_time for n, b, h in zip(nodes, batches, steps)]
        return [max(busy) - x for x in busy]

    base_b = [args.base_batch] * len(nodes)
    base_h = [args.base_local_steps] * len(nodes)
    predicted = {
        "baseline": idle(base_b, base_h),
        "A": idle([s.batch_a for s in speeds], base_h),
        "B": idle([s.batch_b or args.base_batch for s in speeds], base_h)
        if all(s.batch_b for s in speeds)
        else None,
        "C": idle(base_b, [s.local_steps_c for s in speeds]),
    }
    return cluster, nodes, speeds, predicted, prof


TECHNIQUES = {
    "baseline": "keep the base batch and local steps",
    "A": "scale each node's batch by its speed",
    "B": "double each node's batch while it fits",
    "C": "scale each node's local steps by its speed",
}


def decide(predicted: dict, profile, cluster) -> dict:
    """Which technique, and which evidence decides: the model's predicted idle time, or 003's measured one
    (Table 3) where this model and these machines lie inside the evidence 003 measured (the scope of rule
    003-local-steps-by-speed). The two are always shown side by side; when they disagree, the answer says
    which wins and why."""
    from paradvisor.rules.evidence import request_outside
    from paradvisor.rules.loader import load_rule_sets

    totals = {k: sum(v) for k, v in predicted.items() if v is not None}
    model_best = min(totals, key=lambda k: (totals[k], k != "C"))
    measured = {k: sum(v) for k, v in PAPER_IDLE.items()}
    paper_best = min(measured, key=measured.get)
    rule = next((r for r in load_rule_sets() if r.id == "003-local-steps-by-speed"), None)
    outside = (
        request_outside(rule.evidence if rule else None, profile, cluster) if rule else "no 003 rule loaded"
    )
    pm = f"predicted idle per round here: {model_best} {totals[model_best]:.1f} s"
    if paper_best in totals:
        pm += f", {paper_best} {totals[paper_best]:.1f} s"
    paper = (
        f"003 measured (Table 3): {paper_best} {measured[paper_best]:.1f} s total idle vs baseline "
        f"{measured['baseline']:.1f} s (A {measured['A']:.1f} s, B {measured['B']:.1f} s)"
    )
    if model_best == paper_best:
        return {
            "recommendation": model_best,
            "predicted_best": model_best,
            "paper_best": paper_best,
            "evidence": "both",
            "why": f"technique {model_best}: {TECHNIQUES[model_best]} — the model and 003 "
            f"agree ({pm}; {paper})",
        }
    if outside is None:
        return {
            "recommendation": paper_best,
            "predicted_best": model_best,
            "paper_best": paper_best,
            "evidence": "paper",
            "why": f"technique {paper_best}: {TECHNIQUES[paper_best]}. The model favours {model_best} ({pm}), "
            f"but this model and these machines lie inside what 003 measured, and a measurement of the "
            f"setup wins over the model ({paper}); the model's step time follows each node's peak "
            f"and sees none of the synchronisation waits 003 measured",
        }
    return {
        "recommendation": model_best,
        "predicted_best": model_best,
        "paper_best": paper_best,
        "evidence": "model",
        "why": f"technique {model_best}: {TECHNIQUES[model_best]} — the model's prediction for these machines "
        f"({pm}) wins: 003's measurement ({paper}) does not cover them ({outside})",
    }


def run(args) -> int:
    cluster, _nodes, speeds, predicted, prof = compute(args)
    rows = [
        {
            "node": s.node,
            "gpus": s.gpus,
            "avg_tflops": float(half_up(s.tflops, 1)),
            "normalized": float(half_up(s.normalized, 3)),
            "technique_a_batch": s.batch_a,
            "technique_b_batch": s.batch_b,
            "technique_c_local_steps": s.local_steps_c,
        }
        for s in speeds
    ]
    d = decide(predicted, prof, cluster)
    rec = d["why"]
    if args.json:
        from paradvisor.output import emit_json

        emit_json(
            {
                "schema": "paradvisor.hetero/2",
                "cluster": cluster.name,
                "precision": args.precision,
                "base_batch": args.base_batch,
                "base_local_steps": args.base_local_steps,
                "nodes": rows,
                "predicted_idle_s": {
                    k: (None if v is None else [round(x, 3) for x in v]) for k, v in predicted.items()
                },
                "paper_idle_s": PAPER_IDLE,
                **d,
            }
        )
        return 0
    from paradvisor.output import console, esc, table

    con = console()
    con.print(
        f"[bold]{esc(cluster.name)}[/bold]: base batch {args.base_batch}, base local steps {args.base_local_steps}, "
        f"{args.precision} peak TFLOPS"
    )
    t = table(
        None, "node", "GPUs", "avg TFLOPS", "normalised", "A: batch", "B: batch (fits)", "C: local steps"
    )
    for r in rows:
        t.add_row(
            r["node"],
            str(r["gpus"]),
            f"{r['avg_tflops']:.1f}",
            f"{r['normalized']:.3f}",
            str(r["technique_a_batch"]),
            str(r["technique_b_batch"] or "-"),
            str(r["technique_c_local_steps"]),
        )
    con.print(t)
    t = table(
        "GPU idle per round (s): predicted here / 003 Table 3 measured",
        "technique",
        "predicted total",
        "003 measured total",
    )
    for k in ("baseline", "A", "B", "C"):
        v = predicted[k]
        t.add_row(k, "-" if v is None else f"{sum(v):.1f}", f"{sum(PAPER_IDLE[k]):.1f}")
    con.print(t)
    con.print(
        f"recommendation ({'model and 003 agree' if d['evidence'] == 'both' else d['evidence'] + ' evidence wins'})"
        f": {esc(rec)}"
    )
    return 0
