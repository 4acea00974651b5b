"""The run view inside the Monitor tab (panes/monitor.py): a run's status, ETA and predicted vs measured at the top; below it three views —
plots (loss, throughput, step time, memory against step, the prediction drawn as a reference line; drawn
with textual-plotext), one row per rank (progress, sync wait, node, CPU/GPU readings of its process) and
the log at full height. Everything shown comes from `monitor.follow.summarize_run` (the same summary
`paradvisor monitor` and `launch` print) and from `monitor.sampler.RankSampler`.
"""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Button, DataTable, Log, ProgressBar, Static, TabbedContent, TabPane

from paradvisor.output import clean

if TYPE_CHECKING:
    from paradvisor.monitor.follow import RunSummary
from paradvisor.monitor.follow import compare_rows, node_lines, prediction_note
from paradvisor.rundir.records import StepRecord
from paradvisor.tui.text import escape
from paradvisor.tui.widgets import SteadyTable
from paradvisor.units import MiB, fmt_bytes, fmt_seconds

VIEWS = ("plots", "ranks", "log")


class RunView(Vertical):
    """One run: `show(summary, new records)` refreshes it, `show_readings(...)` the live readings."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.readings: dict[int, dict] = {}  # rank -> its process's latest reading (monitor.sampler)
        self.summary: RunSummary | None = None  # the summary shown (monitor.follow.summarize_run)

    def compose(self) -> ComposeResult:
        from textual_plotext import PlotextPlot

        with Horizontal(classes="row", id="run-head"):
            yield Static(id="run-status")
            yield Button("Stop run", id="stop-run", variant="error", compact=True)
        yield ProgressBar(id="run-progress", show_eta=False)
        yield Static(id="run-compare", classes="panel")
        with TabbedContent(initial="plots", id="monitor-views"):
            with TabPane("Plots", id="plots"), Grid(id="plot-grid"):
                for pid in ("loss-plot", "tput-plot", "step-plot", "mem-plot"):
                    yield PlotextPlot(id=pid, classes="plot")
            with TabPane("Ranks", id="ranks"):
                yield SteadyTable(id="rank-table", cursor_type="row", zebra_stripes=True)
                yield Static(id="run-live", classes="muted")
            with TabPane("Log", id="log"):
                yield Log(id="run-log", max_lines=2000)

    def on_mount(self) -> None:
        self.query_one("#rank-table", DataTable).add_columns(
            "rank", "node", "step", "step time", "loss", "sync wait", "CPU", "RSS", "GPU"
        )
        for pid in ("loss-plot", "tput-plot", "step-plot", "mem-plot"):
            self._plot(
                pid,
                [],
                None,
                {
                    "loss-plot": "loss",
                    "tput-plot": "samples/s",
                    "step-plot": "step time (ms)",
                    "mem-plot": "memory (MiB)",
                }[pid],
            )

    def cycle_view(self) -> str:
        tabs = self.query_one("#monitor-views", TabbedContent)
        tabs.active = VIEWS[(VIEWS.index(tabs.active) + 1) % len(VIEWS)] if tabs.active in VIEWS else VIEWS[0]
        return tabs.active

    # ------------------------------------------------------------------------------------------ plots
    def _plot(
        self, pid: str, series: list[tuple[str, list, list]], predicted: float | None, title: str
    ) -> None:
        """Measured series against step; the prediction as a dashed reference line across the steps seen.
        Before the first point only the title says that it waits: no bars, no blocks."""
        w = self.query_one(f"#{pid}")
        plt = w.plt
        plt.clear_data()
        plt.clear_figure()
        xs_all = [x for _, xs, _ in series for x in xs]
        if not xs_all:
            plt.title(f"{title}: waiting for the first step")
            plt.xticks([])
            plt.yticks([])
            w.refresh()
            return
        # A legend needs room; in a small plot the title says which line is the prediction instead.
        roomy = w.size.height >= 10
        legend = roomy and (len(series) > 1 or predicted is not None)  # one line needs no legend
        plt.title(title if roomy or predicted is None else f"{title} (orange: predicted)")
        for label, xs, ys in series:
            if xs:
                plt.plot(xs, ys, label=label if legend else None, marker="braille")
        lo, hi = min(xs_all), max(xs_all)
        if predicted is not None:
            plt.plot(
                [lo, hi] if hi > lo else [lo, lo + 1],
                [predicted, predicted],
                label="predicted",
                marker="braille",
                color="orange",
            )
        plt.xticks(step_ticks(lo, hi))
        w.refresh()

    def show_plots(self, s: RunSummary) -> None:
        pred = s.predicted
        loss = s.loss_points or []
        ev = s.eval_points or []
        series = [("loss", [p[0] for p in loss], [p[1] for p in loss])]
        if ev:
            series.append(("eval", [p[0] for p in ev], [p[1] for p in ev]))
        self._plot("loss-plot", series, None, "loss")
        tp = s.throughput_points or []
        self._plot(
            "tput-plot",
            [("measured", [p[0] for p in tp], [p[1] for p in tp])],
            pred.samples_per_s,
            "samples/s",
        )
        st = s.step_points or []
        step_pred = pred.step_time_s
        self._plot(
            "step-plot",
            [("measured", [p[0] for p in st], [p[1] * 1e3 for p in st])],
            step_pred * 1e3 if step_pred else None,
            "step time (ms)",
        )
        mem = s.memory_points or []
        peak = any(p[2] for p in mem)
        series = [("model states", [p[0] for p in mem], [p[1] / MiB for p in mem])]
        if peak:
            series.append(("CUDA peak", [p[0] for p in mem], [p[2] / MiB for p in mem]))
        ref = pred.memory_per_gpu_bytes if peak else pred.model_state_bytes
        self._plot(
            "mem-plot", series, ref / MiB if ref else None, "memory/GPU MiB" if peak else "model states MiB"
        )

    # ------------------------------------------------------------------------------------- the rest
    def show(self, s: RunSummary, log_records: list[dict], phase: str = "") -> None:
        """`phase`: what the run does while no step comes (monitor.follower.phase_text), '' for nothing."""
        self.summary = s
        if s.total_rounds:
            total, done = s.total_rounds, s.round
            where = f"round {done}/{total} (step {s.step})"
        else:
            total, done = s.total_steps or 1, s.step
            where = f"step {s.step}/{s.total_steps or '?'}"
        where += f" ({phase})" if phase else ""
        self.query_one("#run-progress", ProgressBar).update(total=total, progress=min(done, total))
        colour = {"finished": "green", "failed": "red", "cancelled": "yellow", "running": "cyan"}.get(
            s.status, "white"
        )
        eta = f", ETA {fmt_seconds(s.eta_s)}" if s.eta_s is not None else ""
        head = [
            f"[b]{escape(s.name)}[/b] {escape(s.label or '')}: [{colour}]{escape(s.status)}"
            f"[/{colour}] — {escape(where)}, {fmt_seconds(s.elapsed_s)}{eta}"
        ]
        nodes = s.nodes or []
        if len(nodes) > 1 and any(n.get("host") or n.get("sample") for n in nodes):
            # a run on several machines: each node's state, ranks and its own GPU/CPU reading
            head.extend(escape(line) for line in node_lines(s))
        if s.failure:
            tone = "red" if s.status == "failed" else "yellow"
            head.append(f"[{tone}]{escape(s.failure)}[/{tone}]")
        if s.replan:
            head.append(
                f"[yellow]out of memory — next plan that fits: {escape(s.replan.get('label'))} "
                f"({escape(s.replan.get('change'))}); press R to launch it[/yellow]"
            )
        if s.unreadable:
            head.append(f"[dim]skipped what could not be read: {escape('; '.join(s.unreadable))}[/dim]")
        self.query_one("#run-status", Static).update("\n".join(head))
        self.query_one("#run-compare", Static).update(
            compare_text(compare_rows(s), prediction_note(s), s.loss, short=self.app.size.height < 32)
        )
        self.show_plots(s)
        self.show_ranks()
        log = self.query_one("#run-log", Log)
        for rec in log_records:
            if rec.get("kind") == "step" and rec["rank"] == 0 or rec.get("kind") in ("outer", "start", "end"):
                log.write_line(clean(log_line(rec)))

    def show_ranks(self) -> None:
        s = self.summary
        if s is None:
            return
        table = self.query_one("#rank-table", DataTable)
        table.clear()
        total = s.total_steps
        for r in s.ranks:
            rd = self.readings.get(r["rank"], {})
            gpu = ""
            if rd.get("gpu_mem_bytes") is not None:
                gpu = f"GPU{rd.get('gpu_index', '?')} {fmt_bytes(rd['gpu_mem_bytes'])}"
                if rd.get("gpu_util_pct") is not None:
                    gpu += f" {rd['gpu_util_pct']:.0f}%"
            table.add_row(
                str(r["rank"]),
                Text(clean(r.get("node_name") or ("" if r.get("node") is None else str(r["node"])))),
                f"{r['step']}/{total or '?'}",
                fmt_seconds(r["step_time_s"]) if r["step_time_s"] is not None else "",
                "" if r["loss"] is None else f"{r['loss']:.4f}",
                f"{r['sync_wait_s']:.2f} s" if r["round"] else "",
                "" if rd.get("cpu_pct") is None else f"{rd['cpu_pct']:.0f}%",
                "" if rd.get("rss_bytes") is None else fmt_bytes(rd["rss_bytes"]),
                gpu or ("" if not rd else "—"),
            )

    def show_readings(self, text: str, ranks: dict[int, dict]) -> None:
        self.query_one("#run-live", Static).update(text)
        if ranks != self.readings:
            self.readings = ranks
            self.show_ranks()

    def clear_log(self) -> None:
        self.query_one("#run-log", Log).clear()

    def write_log_lines(self, lines: list[str]) -> None:
        self.query_one("#run-log", Log).write_lines([clean(ln) for ln in lines])


def compare_text(rows: list[dict], note: str, loss: float | None, *, short: bool) -> Text:
    """Predicted vs measured, one metric a line (short terminals: two a line, the note left out)."""
    t = Text()
    t.append("predicted vs measured", style="bold")
    t.append("\n" if short else f"  {clean(note)}\n", style="dim")
    for i, r in enumerate(rows):
        if short:
            t.append(f"{r['metric']} ", style="bold")
            t.append(f"{r['measured'] or '—'} (pred. {r['predicted'] or '—'}")
            if r["error"]:
                t.append(f" {r['error']}", style=_tone(r["error"]))
            t.append(")" + ("\n" if i % 2 else "   "))
        else:
            t.append(f"{r['metric']:<18}", style="bold")
            t.append(f"predicted {r['predicted'] or '—':>10}   measured {r['measured'] or '—':>10}")
            if r["error"]:
                t.append(f"   {r['error']}", style=_tone(r["error"]))
            t.append("\n")
    if loss is not None:
        t.append("loss " if short else f"{'loss':<18}", style="bold")
        t.append(f"{loss:.4f}")
    t.rstrip()
    return t


def _tone(error: str) -> str:
    """Green within 25 %, yellow beyond."""
    return "yellow" if abs(float(error.rstrip("%"))) > 25 else "green"


def step_ticks(lo: float, hi: float, n: int = 5) -> list[int]:
    """About `n` whole-step ticks from lo to hi (steps are integers: no 5.2)."""
    lo, hi = int(lo), int(hi)
    if hi <= lo:
        return [lo]
    every = max(1, -(-(hi - lo) // (n - 1)))
    ticks = list(range(lo, hi + 1, every))
    if ticks[-1] != hi:  # the last step always shows: the nearest tick makes room for it when close
        if hi - ticks[-1] < every / 2 and len(ticks) > 1:
            ticks[-1] = hi
        else:
            ticks.append(hi)
    return ticks


def log_line(rec: dict) -> str:
    if rec.get("kind") == "step":
        st = StepRecord.from_doc(rec)
        loss = "" if st.loss is None else f" loss {st.loss:.4f}"
        return f"step {st.step}{loss} {st.samples_per_s or 0:.1f} samples/s {st.step_time_s * 1e3:.0f} ms"
    if rec.get("kind") == "outer":
        return (
            f"outer sync round {rec['round']} rank {rec['rank']}: waited {rec.get('sync_wait_s') or 0:.3f} s"
        )
    return f"{rec.get('kind')}: world {rec.get('world_size')}"
