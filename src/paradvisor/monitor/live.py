"""What `paradvisor launch` shows while its run goes and when it ends, read from the run directory
(monitor/follow.py): in a terminal a rich progress bar, elsewhere one plain line at most every few seconds;
at the end the predicted-vs-measured table."""

from __future__ import annotations

import sys
import time

from paradvisor.monitor.follow import (
    RunSummary,
    compare_rows,
    prediction_note,
    summarize_run,
)
from paradvisor.monitor.follower import MetricsFollower
from paradvisor.output import console, esc, table
from paradvisor.rundir import RunDir
from paradvisor.rundir.metrics import MetricsReader
from paradvisor.units import fmt_seconds


class LogIndex:
    """What a `launch --quiet` runs in place of the progress display: nothing shown, but the run's log is read on
    as it grows (every EVERY_S seconds, only the new bytes), so metrics.index.json is kept beside it as a shown
    run's follower keeps it, and `monitor --once` or `validate` on a days-long run read only its tail."""

    EVERY_S = 5.0

    def __init__(self, run_dir):
        self.reader = MetricsReader(RunDir(run_dir).metrics, index=True)
        self.last = 0.0

    def __call__(self) -> None:
        if time.monotonic() - self.last >= self.EVERY_S:
            self.last = time.monotonic()
            self.reader.read(keep=0)


class LiveProgress:
    """What `launch` shows while a run goes, from its run directory (monitor.follow): in a terminal a rich
    progress bar with step, loss, throughput and ETA, and what the run is doing while no step comes (a save, an
    eval, the export: rundir/phases.py); elsewhere (a pipe, a log file) one plain line at most every
    LINE_EVERY_S seconds, when the step or the phase moved. `summary()` prints predicted vs measured."""

    LINE_EVERY_S = 5.0

    def __init__(self, launch):
        self.launch = launch
        self.follower = MetricsFollower(launch.run_dir)
        self.tty = sys.stderr.isatty()
        self.bar = self.task = None
        self.last_line = 0.0
        self.last_step = -1
        self.last_phase: dict | None = None
        self.s = None

    def current(self) -> RunSummary:
        self.follower.poll(keep=0)
        self.s = summarize_run(self.launch.run_dir, self.follower.records, skipped=self.follower.skipped)
        return self.s

    def __call__(self) -> None:
        s = self.current()
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            if self.bar is None:
                self.bar = Progress(
                    TextColumn("[bold]{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(),
                    console=console(stderr=True),
                    transient=False,
                )
                self.bar.start()
                self.task = self.bar.add_task(esc(s.name), total=s.total_steps or None, info="starting")
            self.bar.update(self.task, completed=s.step, info=esc(progress_text(s, self.phase())))
        elif (s.step, self.follower.phase) != (self.last_step, self.last_phase) and (
            time.monotonic() - self.last_line >= self.LINE_EVERY_S
        ):
            self.last_line, self.last_step, self.last_phase = time.monotonic(), s.step, self.follower.phase
            sys.stderr.write(f"step {s.step}/{s.total_steps or '?'}: {progress_text(s, self.phase())}\n")
            sys.stderr.flush()

    def phase(self) -> str:
        """The phase in effect while the run goes ('' once it ended: the last records close no phase)."""
        return self.follower.doing(self.s.status) if self.s is not None else ""

    def close(self) -> None:
        if self.bar is not None:
            if self.s is not None:
                s = self.current()
                self.bar.update(self.task, completed=s.step, info=progress_text(s))
            self.bar.stop()

    def summary(self) -> None:
        self.follower.reader.finish()
        s = self.current()
        rows = compare_rows(s)
        head = f"{s.name}: {s.step}/{s.total_steps or '?'} steps in {fmt_seconds(s.elapsed_s)}"
        if s.loss is not None:
            head += f", final loss {s.loss:.4f}"
        sys.stderr.write(head + "\n")
        if not rows:
            return
        if self.tty:
            t = table(
                f"predicted vs measured ({prediction_note(s)})", "metric", "predicted", "measured", "error"
            )
            for r in rows:
                t.add_row(r["metric"], r["predicted"] or "—", r["measured"] or "—", r["error"])
            console(stderr=True).print(t)
        else:
            sys.stderr.write(f"predicted vs measured ({prediction_note(s)}):\n")
            for r in rows:
                sys.stderr.write(
                    f"  {r['metric']}: predicted {r['predicted'] or '—'}, measured {r['measured'] or '—'}"
                    + (f" ({r['error']})" if r["error"] else "")
                    + "\n"
                )


def progress_text(s: RunSummary, phase: str = "") -> str:
    """'loss 3.2733, 608.9 samples/s, ETA 4.1 s' (what is known so far), after the phase in effect if any
    ('saving a checkpoint at step 200: 12 s so far, ~41 s expected')."""
    parts = [phase] if phase else []
    if s.loss is not None:
        parts.append(f"loss {s.loss:.4f}")
    if s.eval_points:
        parts.append(f"eval {s.eval_points[-1][1]:.4f}")
    if s.samples_per_s:
        parts.append(f"{s.samples_per_s:.1f} samples/s")
    if s.eta_s is not None:
        parts.append(f"ETA {fmt_seconds(s.eta_s)}")
    return ", ".join(parts) or "waiting for the first step"
