"""`paradvisor verify --preset FILE`: the plan's per-step losses against a one-process run of the same
model and global batch (fp32, dropout off). Exit 0 equal within tolerance, 1 not equal or a run failed."""

from __future__ import annotations

from pathlib import Path

from paradvisor.rundir.status import RunState


def add_parser(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="prove a plan by numerics: its losses vs a one-process run",
        description="Runs the preset's plan and a one-process reference of the same model and global "
        "batch on this machine's CPU (fp32, dropout off, same seed and data) and compares "
        "the loss of every step. Exit code: 0 equal within the tolerance, 1 not.",
    )
    p.add_argument(
        "--preset",
        required=True,
        metavar="NAME|FILE",
        help="a preset: a name (./presets, ~/.config/paradvisor/presets, the shipped ones) or a TOML file",
    )
    p.add_argument("--steps", type=int, default=5, help="steps to compare (default 5)")
    p.add_argument(
        "--tolerance", type=float, default=None, help="max relative loss difference (default 1e-4)"
    )
    p.add_argument("--runs-dir", default="runs", metavar="DIR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args) -> int:
    from paradvisor.launch.verify import DEFAULT_TOLERANCE, verify
    from paradvisor.rundir.preset import load_preset, resolve_preset

    doc = verify(
        load_preset(resolve_preset(args.preset)),
        Path(args.runs_dir),
        steps=args.steps,
        tolerance=args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE,
    )
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
    else:
        from paradvisor.output import console, esc, table

        con = console()
        t = table(f"{doc['label']} vs one process", "step", "loss", "reference", "relative difference")
        for r in doc["steps"]:
            t.add_row(
                str(r["step"]),
                f"{r['loss']:.7f}" if r["loss"] is not None else "—",
                f"{r['reference']:.7f}",
                f"{r['relative_difference']:.2e}",
            )
        con.print(t)
        if doc["status"] != RunState.FINISHED or doc["reference_status"] not in (RunState.FINISHED, "given"):
            con.print(
                f"[red]run {esc(doc['status'])}[/red]: {esc(doc.get('reason') or '')} "
                f"(reference: {esc(doc['reference_status'])})"
            )
        worst = doc["max_relative_difference"]
        verdict = "equal" if doc["equal"] else "NOT equal"
        con.print(
            f"{verdict}: max relative difference {worst:.2e} (tolerance {doc['tolerance']:.0e})"
            if worst is not None
            else f"{verdict}: no losses to compare"
        )
    return 0 if doc["equal"] else 1
