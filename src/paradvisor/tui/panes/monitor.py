"""Tab 4, Monitor: follows one run directory (the run started here, or one opened with --open) twice a
second and shows it in a `RunView` (status, predicted vs measured, plots, ranks, log). The Stop button
posts `StopRequested`: the app owns the run.

The RunView (30 widgets: four plots, the rank table, the log) is built the first time the tab is shown
(`build`, panes/later.py), not at start: every restyle of the whole screen (the first one, a resize across a breakpoint, a
modal screen closing) walks every widget mounted, shown or not (benchmarks/tui_stall.py). Until then there is
nothing to show, so the run is not read either."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.widgets import Button, Static, Tabs

from paradvisor.tui.messages import StopRequested
from paradvisor.tui.panes.later import LaterPane

if TYPE_CHECKING:
    from paradvisor.monitor.follow import RunSummary
from paradvisor.monitor.follow import summarize_run
from paradvisor.monitor.follower import MetricsFollower
from paradvisor.tui.runview import RunView

REFRESH_S = 0.5


class MonitorPane(LaterPane):
    def __init__(self, *, open_run: str | None = None) -> None:
        super().__init__("4 Monitor", id="monitor")
        self.run_dir: Path | None = None
        self.follower = None  # monitor.follower.MetricsFollower of run_dir
        self.run_summary: RunSummary | None = None  # monitor.follow.summarize_run of run_dir, as last shown
        self._failure_logged: Path | None = None  # the run whose last log lines are already in the log
        self._readings: tuple[str, dict[int, dict]] | None = None  # the latest, for a view built later
        self._eager = bool(open_run)  # --open: the session opens on this tab, so the view is composed
        if open_run:
            self.follow(Path(open_run))

    def compose(self) -> ComposeResult:
        if self._eager:
            yield from self.content()

    def content(self) -> ComposeResult:
        yield RunView(id="monitor-pane")

    def on_built(self) -> None:
        """The view is there: the latest reading and the run shown in it at once (until then nothing reads the
        run: a record read into a view not yet there would be lost)."""
        if self._readings is not None:
            self.view.show_readings(*self._readings)
        self.refresh_run()

    def on_mount(self) -> None:
        self.built = self._eager  # a composed view is mounted before its pane
        self.set_interval(REFRESH_S, self.refresh_run)

    # ------------------------------------------------------------------------------------------ widgets
    @property
    def view(self) -> RunView:
        return self.query_one(RunView)

    @property
    def main_widget(self) -> Tabs:
        return self.query_one("#monitor-views Tabs", Tabs)

    @on(Button.Pressed, "#stop-run")
    def _stop_pressed(self) -> None:
        self.post_message(StopRequested())

    # -------------------------------------------------------------------------------------------- the run
    def follow(self, run_dir: Path) -> None:
        """Show `run_dir` from now on (its metrics read from the start)."""
        self.run_dir, self.follower = run_dir, MetricsFollower(run_dir)

    def start_following(self, run_dir: Path) -> None:
        """A run started here: follow it, with the log of the previous run cleared."""
        self.follow(run_dir)
        if self.built:  # a view built later starts with an empty log
            self.view.clear_log()

    def refresh_run(self) -> None:
        from textual.app import ScreenStackError
        from textual.css.query import NoMatches

        try:
            self._refresh_run()
        except (NoMatches, ScreenStackError):  # the app is closing: its widgets (or screens) are already gone
            pass

    def _refresh_run(self) -> None:
        if not self.built:
            return
        if self.run_dir is None or self.follower is None:
            self.query_one("#run-status", Static).update("No run yet: launch a preset (tab 3, or L).")
            return
        new = self.follower.poll(keep=400)
        s = self.run_summary = summarize_run(
            self.run_dir, self.follower.records, skipped=self.follower.skipped
        )
        view = self.view
        view.show(s, new, self.follower.doing(s.status))
        if s.status == "failed" and s.last_log_lines and self._failure_logged != self.run_dir:
            self._failure_logged = self.run_dir
            view.write_log_lines([f"| {ln}" for ln in s.last_log_lines])

    def show_readings(self, text: str, ranks: dict[int, dict]) -> None:
        self._readings = (text, ranks)
        if self.built:
            self.view.show_readings(text, ranks)

    def cycle_view(self) -> str:
        return self.view.cycle_view()
