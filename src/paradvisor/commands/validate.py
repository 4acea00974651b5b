"""`paradvisor validate RUN_DIR`: predicted vs measured for a finished run, with relative errors."""

from __future__ import annotations

from paradvisor.units import fmt_bytes


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="compare a run's predicted and measured memory and time")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--calibration", metavar="FILE", help="calibration file (default: this machine's)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _fmt(metric: str, v) -> str:
    if v is None:
        return "—"
    if "bytes" in metric:
        return fmt_bytes(v)
    return f"{v:.4g}"


def run(args) -> int:
    from paradvisor.hardware import calibration
    from paradvisor.monitor.validate import validate

    cal = calibration.load(args.calibration) if args.calibration else None
    doc = validate(args.run_dir, cal)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(doc)
        return 0
    from paradvisor.output import console, esc, table

    con = console()
    con.print(
        f"[bold]{esc(doc['name'])}[/bold] {esc(doc['label'])} on {doc['world_size']} process(es); device: {esc(doc['device'])}"
    )
    t = table(None, "metric", "predicted", "measured", "error")
    for r in doc["rows"]:
        err = "" if r["rel_error"] is None else f"{r['rel_error']:+.1%}"
        t.add_row(r["metric"], _fmt(r["metric"], r["predicted"]), _fmt(r["metric"], r["measured"]), err)
    con.print(t)
    for n in doc.get("notes", []):
        con.print(f"note: {n}")
    if doc.get("skipped_lines"):
        import sys

        sys.stderr.write(f"validate: skipped {doc['skipped_lines']} unreadable line(s) of metrics.jsonl\n")
    return 0
