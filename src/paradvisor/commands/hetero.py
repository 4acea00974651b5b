"""`paradvisor hetero`: per-node allocation for heterogeneous (geo-distributed) nodes (003, Tables 2-3)."""

from __future__ import annotations

from paradvisor.errors import InputError
from paradvisor.units import half_up


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
    """The advice for the command's arguments (plan/hetero.py advise_hetero)."""
    from paradvisor.hardware import calibration
    from paradvisor.hardware.machines import resolve_machines
    from paradvisor.model.load import load_profile
    from paradvisor.plan.hetero import advise_hetero

    if args.base_batch < 1 or args.base_local_steps < 1 or args.seq_len < 1:
        raise InputError("--base-batch, --base-local-steps and --seq-len must be at least 1")
    # measured speeds where `calibrate` ran on the GPU
    cluster = calibration.apply(resolve_machines(cluster_file=args.cluster)[0])
    if not any(n.gpus for n in cluster.online_nodes):
        raise InputError("the cluster has no node with GPUs", where=args.cluster)
    return advise_hetero(
        cluster,
        load_profile(args.model),
        seq_len=args.seq_len,
        precision=args.precision,
        base_batch=args.base_batch,
        base_local_steps=args.base_local_steps,
    )


def rows_of(speeds) -> list[dict]:
    """One row per node: its speed and each technique's allocation (the table and --json's `nodes`)."""
    return [
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


def run(args) -> int:
    from paradvisor.plan.hetero import PAPER_IDLE

    adv = compute(args)
    cluster, predicted, d = adv.cluster, adv.predicted_idle, adv.decision
    rows = rows_of(adv.speeds)
    rec = d["why"]
    if args.json:
        from paradvisor.output import emit_json

        idle = {k: (None if v is None else [round(x, 3) for x in v]) for k, v in predicted.items()}
        emit_json(
            {
                "schema": "paradvisor.hetero/2",
                "cluster": cluster.name,
                "precision": args.precision,
                "base_batch": args.base_batch,
                "base_local_steps": args.base_local_steps,
                "nodes": rows,
                "predicted_idle_s": idle,
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
