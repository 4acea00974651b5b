"""The run the interactive session starts and owns: the confirmation (preflight, checkpoint interval and
prediction in workers), the start, the worker waiting for it, a stop (graceful first), a resume from the Monitor
tab's run and a re-plan after an OOM. A mixin of ParadvisorApp (tui/app.py), which keeps the tabs and keys; every
engine's run is a launch/handle.py RunHandle here."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ScreenStackError
from textual.css.query import NoMatches

from paradvisor.errors import InputError
from paradvisor.launch import runner
from paradvisor.launch.resume import resume_preset, with_checkpoint_interval
from paradvisor.rundir.status import write_json_atomic
from paradvisor.spec.preset import load_preset
from paradvisor.train.check import run_checks
from paradvisor.tui.screens import ConfirmLaunchScreen, launch_header, launch_question
from paradvisor.tui.text import escape


class RunControl:
    """What outlives a tab: `self.launch` (the RunHandle of the run started here, or None)."""

    def _run_going(self) -> bool:
        return self.launch is not None and self.launch.running()

    def ask_to_start(self, preset, lineage: dict | None = None) -> None:
        """Start `preset` after a confirmation that shows the command and the predicted memory and time
        (`confirm=False`: at once). The preflight, the prediction and the start run in workers: the question
        appears as soon as the preflight passed, and its prediction fills in behind it."""
        if self._run_going():
            raise InputError("a run is already going: stop it first (s)")
        self.launcher.show_working("checking the plan…")
        self._preflight_worker(preset, lineage)

    @work(thread=True, exclusive=True, group="preflight")
    def _preflight_worker(self, preset, lineage: dict | None = None) -> None:
        try:
            # bad presets fail here, before the question (the trainer's checks of data and weights in this process)
            runner.validate(preset, reach=False, trainer_checks=run_checks)
            # the checkpoint interval decided as `paradvisor launch` decides it (the prediction's when unset)
            preset, ck_line = with_checkpoint_interval(
                preset, Path(preset.launch.checkpoint_dir or self.runs_dir)
            )
        except (InputError, OSError) as exc:
            self.call_from_thread(self.launcher.show_error, exc)
            return
        if not self.confirm:
            self.call_from_thread(self.start_run, preset, lineage)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                try:
                    self.start_run(preset, lineage)
                except InputError as exc:
                    self.launcher.show_error(exc)

        ck = f"\n{escape(ck_line)}"
        if lineage:
            ck += escape(f"\nresuming {lineage['parent']} from step {lineage['resume_step']}")
        screen = ConfirmLaunchScreen(
            launch_header(preset, str(self.runs_dir)) + ck + "\n[dim]predicting memory and time…[/dim]"
        )
        self.call_from_thread(self.push_screen, screen, answered)
        self.call_from_thread(self.launcher.show_working, None)
        text = launch_question(preset, str(self.runs_dir))  # the prediction, here in the worker
        self.call_from_thread(screen.set_text, text + ck)

    def start_run(self, preset, lineage: dict | None = None) -> None:
        if self._run_going() or self._starting:
            raise InputError("a run is already going: stop it first (s)")
        self._starting = True
        self.launcher.show_working(f"starting {preset.name}…")
        self._start_worker(preset, lineage)

    @work(thread=True, exclusive=True, group="start")
    def _start_worker(self, preset, lineage: dict | None = None) -> None:
        try:
            launch = runner.start(preset, runs_dir=self.runs_dir)
            if lineage:  # the resumed run names its parent and step, as `paradvisor launch --resume` writes
                launch.lineage = lineage
                write_json_atomic(launch.status_path, launch.status())
        except (InputError, OSError) as exc:
            self._starting = False
            self.call_from_thread(self.launcher.show_error, exc)
            return
        self.call_from_thread(self._started, preset, launch)

    def _started(self, preset, launch) -> None:
        self.launch, self._starting = launch, False
        self.launcher.show_working(None)
        self.monitor.start_following(launch.run_dir)
        self.launcher.show_started(preset.name, launch.run_dir)
        self.wait_for_run(launch)
        self.call_next(self.action_tab, "monitor")  # a coroutine: the Monitor's view may be built first

    @work(thread=True, group="wait")
    def wait_for_run(self, launch) -> None:
        doc = launch.wait()

        def ended() -> None:  # the Launch tab's line says how it ended (never "launched" for a failed run)
            try:
                self.launcher.show_ended(launch.preset.name, launch.run_dir, doc)
            except (NoMatches, ScreenStackError):  # the session is closing
                return
            self.notify(
                escape(f"run {doc['status']}: {launch.run_dir.name}"),
                severity="information" if doc["status"] == "finished" else "error",
            )

        try:
            self.call_from_thread(ended)
        except RuntimeError:  # the app has already stopped
            pass

    def action_launch_replan(self) -> None:
        r = self.run_summary.replan if self.run_summary else None
        if not r:
            self.notify("no re-plan: the last run did not run out of memory", severity="warning")
            return
        self.launcher.show_working(f"reading {r['path']}…")
        self._read_then_ask(lambda: (load_preset(r["path"]), None))

    def action_resume_run(self) -> None:
        """The run shown on the Monitor tab, continued from its newest complete checkpoint in a new run
        directory (what `paradvisor launch --resume RUN_DIR` does), after the usual confirmation."""
        if self.run_dir is None:
            self.notify("no run on the Monitor tab to resume (v opens one)", severity="warning")
            return
        run_dir = self.run_dir
        self.launcher.show_working(f"reading {run_dir}…")
        self._read_then_ask(lambda: resume_preset(run_dir, reason="resumed from the interactive session"))

    @work(thread=True, exclusive=True, group="read-preset")
    def _read_then_ask(self, read) -> None:
        """`read()` -> (preset, lineage or None) in a worker (it reads files), then the usual confirmation."""
        try:
            preset, lineage = read()
        except InputError as exc:
            self.call_from_thread(self.launcher.show_working, None)
            self.call_from_thread(self.notify, escape(exc), severity="error", timeout=8)
            return

        def ask() -> None:
            try:
                self.ask_to_start(preset, lineage)
            except InputError as exc:
                self.launcher.show_working(None)
                self.notify(escape(exc), severity="error", timeout=8)

        self.call_from_thread(ask)

    def action_stop_run(self) -> None:
        if self._run_going():
            graceful = getattr(self.launch, "stopping", "") is None
            if graceful:
                self.launch.cancel(graceful=True)
                self.notify(
                    "stopping the run: a checkpoint at the next step, then every rank ends (s again: now)"
                )
            else:
                self.launch.cancel()
                self.notify("stopping the run: every rank ends")
