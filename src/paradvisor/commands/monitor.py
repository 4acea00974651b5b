"""`paradvisor monitor RUN_DIR` (follow a run) and `paradvisor runs` (list run directories)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from paradvisor.errors import InputError
from paradvisor.rundir.status import RunState
from paradvisor.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from paradvisor.monitor.follow import RunSummary


def add_parser(sub) -> None:
    p = sub.add_parser(
        "monitor",
        help="follow a run directory: progress, loss, throughput, memory, status",
        description="Follows RUN_DIR until the run ends (or now, with --once) and exits with its "
        "status: 0 finished, 1 failed / cancelled / interrupted.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--json", action="store_true", help="print the final summary as JSON (schema paradvisor.monitor/1)"
    )
    p.add_argument("--once", action="store_true", help="report the current state and exit")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    p.set_defaults(run=run)
    r = sub.add_parser("runs", help="list run directories with status and headline figures")
    r.add_argument("--runs-dir", default="runs")
    r.add_argument("--json", action="store_true")
    r.set_defaults(run=run_list)


def _line(s: RunSummary) -> str:
    """The run's line, with the phase in effect while it runs (a save, an eval, the export: s.phase)."""
    from paradvisor.monitor.follower import describe

    phase = describe(s.phase)
    parts = [f"{s.status}", f"step {s.step}/{s.total_steps or '?'}"] + ([phase] if phase else [])
    if s.loss is not None:
        parts.append(f"loss {s.loss:.4f}")
    if s.eval_points:
        parts.append(f"eval loss {s.eval_points[-1][1]:.4f} (step {s.eval_points[-1][0]})")
    if s.samples_per_s:
        parts.append(f"{s.samples_per_s:.1f} samples/s")
    if s.model_state_bytes_per_rank:
        parts.append(f"model states {fmt_bytes(s.model_state_bytes_per_rank)}/rank")
    if s.progress is not None and s.status == RunState.RUNNING:
        parts.append(f"{s.progress:.0%}")
    if s.eta_s is not None:
        parts.append(f"ETA {fmt_seconds(s.eta_s)}")
    return ", ".join(parts)


def _follow(s: RunSummary, current, interval: float, show) -> RunSummary:
    """Poll until the run ends, showing each summary; a Ctrl-C whose KeyboardInterrupt a finalizer dropped
    stops it too (paradvisor/interrupts.py)."""
    from paradvisor import interrupts
    from paradvisor.rundir.status import TERMINAL

    while s.status not in TERMINAL:
        time.sleep(interval)
        interrupts.check()
        s = current()
        show(s)
    return s


def run(args) -> int:
    from paradvisor.monitor.follow import node_lines, summarize_run
    from paradvisor.monitor.follower import MetricsFollower, phase_doc
    from paradvisor.rundir import RunDir
    from paradvisor.rundir.status import TERMINAL

    run_dir = Path(args.run_dir)
    if not RunDir(run_dir).is_run() and not RunDir(run_dir).plan.exists():
        raise InputError("not a run directory (no status.json or plan.toml)", where=str(run_dir))
    if args.interval <= 0:
        raise InputError("--interval must be positive")
    follower = MetricsFollower(run_dir)

    def current() -> RunSummary:
        follower.poll(keep=0)
        summary = summarize_run(run_dir, follower.records, skipped=follower.skipped)
        if summary.status in TERMINAL or args.once:  # a last line without its newline stays unreadable
            follower.reader.finish()
            summary = summarize_run(run_dir, follower.records, skipped=follower.skipped)
        return replace(summary, phase=None if summary.status in TERMINAL else phase_doc(follower.phase))

    s = current()
    if not args.once and s.status not in TERMINAL and not args.json:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from paradvisor.output import console, esc

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            transient=False,
            console=console(),
        ) as bar:
            task = bar.add_task(esc(s.name), total=s.total_steps or None, info=esc(_line(s)))
            s = _follow(
                s, current, args.interval, lambda s: bar.update(task, completed=s.step, info=esc(_line(s)))
            )
    elif not args.once:
        s = _follow(s, current, args.interval, lambda s: None)
    if args.json:
        from paradvisor.output import emit_json

        emit_json(s.to_doc())
    else:
        print(f"{s.name}: {_line(s)}")
        if s.status == RunState.FINISHED and s.reason:  # e.g. a script that never reported a step
            print(s.reason)
        if s.failure:
            print(s.failure)
            for ln in s.last_log_lines[-10:]:
                print(f"  | {ln}")
        if len(s.nodes) > 1:
            for line in node_lines(s):
                print(line)
        if s.sync_wait_s_by_rank:
            print(
                "sync wait per rank: "
                + ", ".join(f"rank {k} {v:.2f} s" for k, v in s.sync_wait_s_by_rank.items())
            )
    if s.unreadable:
        sys.stderr.write(f"monitor: skipped what could not be read: {'; '.join(s.unreadable)}\n")
    return 0 if s.status == RunState.FINISHED else 1


def _with_lineage(runs: list) -> list[tuple]:
    """Each run with its parent (status.json's `parent`), its lineage (first ancestor -> itself) and how it
    continued its parent; ordered so that a lineage's runs follow each other."""
    import os

    from paradvisor.launch.resume import lineage_of

    keys = [os.path.realpath(e.run_dir) for e in runs]  # Path.resolve's
    docs = {k: e.lineage for k, e in zip(keys, runs)}
    out = []
    for e, key in zip(runs, keys):
        d = docs[key]
        parent = d.get("parent") if isinstance(d.get("parent"), str) else None
        resumed = (
            f"{Path(parent).name} @ step {d.get('resume_step')} ({d.get('lineage_reason', 'resume')})"
            if parent
            else None
        )
        lineage = [str(p) for p in lineage_of(Path(e.run_dir), docs)] if d.get("parent") else [key]
        out.append((e, {"parent": parent, "lineage": lineage, "resumed": resumed}))
    return sorted(out, key=lambda x: x[1]["lineage"])


TABLE_ROWS = 1000  # `runs` lists more runs than this a run to a line pair, not as a table


def _run_cells(s: dict) -> tuple[str, ...]:
    """One run's cells: name (indented under its parent), plan, status, step, loss, samples/s, elapsed, ETA,
    resumed from."""
    return (
        ("  " * (len(s["lineage"]) - 1) + "└ " if len(s["lineage"]) > 1 else "") + Path(s["run_dir"]).name,
        s["label"] or "",
        s["status"],
        f"{s['step']}/{s['total_steps'] or '?'}"
        + (
            f" ({s['progress']:.0%})"
            if s.get("progress") is not None and s["status"] == RunState.RUNNING
            else ""
        ),
        "" if s["loss"] is None else f"{s['loss']:.4f}",
        "" if not s["samples_per_s"] else f"{s['samples_per_s']:.1f}",
        fmt_seconds(s["elapsed_s"]),
        "" if s.get("eta_s") is None else fmt_seconds(s["eta_s"]),
        s["resumed"] or "",
    )


def _print_line_pairs(con, cells: list, width: int) -> None:
    """Each run's name on a line of its own, its figures beneath (a run name, up to 76 characters, is what
    `monitor` and `--open` take: never cut, never folded). Printed 500 runs at a time, the lines that fit the
    width as one unwrapped text (the names soft-wrapped), a longer line of figures on its own, wrapped: a print
    per line cost ~0.13 ms of Rich's set-up, and Rich's wrapping of lines that fit as much again."""
    from rich.console import Group
    from rich.text import Text

    from paradvisor.output import clean

    whole, parts = Text("\n", no_wrap=True, overflow="ignore"), []
    lines: list = []
    for i, (name, label, status, step, loss, sps, elapsed, eta, resumed) in enumerate(cells, 1):
        parts.append(Text(clean(name), style="bold"))
        figures = [
            *(label, status, f"step {step}", f"loss {loss}" if loss else ""),
            *(f"{sps} samples/s" if sps else "", elapsed, f"ETA {eta}" if eta else ""),
            f"resumed from {resumed}" if resumed else "",
        ]
        fig = Text(clean("  " + " · ".join(f for f in figures if f)))
        if fig.cell_len <= width:
            parts.append(fig)
        else:
            lines, parts = [*lines, whole.join(parts), fig], []
        if i % 500 == 0 or i == len(cells):  # in pieces: memory bounded
            con.print(Group(*lines, *([whole.join(parts)] if parts else [])))
            lines, parts = [], []


def run_list(args) -> int:
    from paradvisor.monitor import runcache

    listed = _with_lineage(runcache.entries(args.runs_dir))
    if args.json:
        return runcache.write_runs_json(sys.stdout, args.runs_dir, listed)
    runs = [{**e.row, **extra} for e, extra in listed]
    if not runs:
        print(f"no runs in {args.runs_dir}", file=sys.stderr)
        return 0
    from paradvisor.output import console, table

    con = console()
    skipped = [
        f"{Path(s['run_dir']).name}: {'; '.join(s['unreadable'])}" for s in runs if s.get("unreadable")
    ]
    cells = [_run_cells(s) for s in runs]
    width = con.width  # a terminal's size is asked for each time it is read
    # narrower than a table of whole names, or more runs than a table is quick to lay out (Rich measures every
    # cell: 10,000 in 6 s)
    if width < 120 or len(cells) > TABLE_ROWS:
        _print_line_pairs(con, cells, width)
    else:
        t = table(
            None, "run", "plan", "status", "step", "loss", "samples/s", "elapsed", "ETA", "resumed from"
        )
        for row in cells:
            t.add_row(*row)
        con.print(t)
    for line in skipped:
        sys.stderr.write(f"runs: skipped what could not be read in {line}\n")
    return 0
