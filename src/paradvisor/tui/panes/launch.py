"""Tab 3, Launch: the user's presets (the folder presets are saved to: ~/.config/paradvisor/presets, or
--presets-dir) and the shipped ones, the plan selected in tab 2 with the command each node would run,
saving that plan as a preset into the user's folder. Starting a run is the app's (it asks first and owns the run):
this pane posts `LaunchRequested`. Its widgets are mounted after the session's first paint (panes/later.py):
a plan selected before then is shown once they are."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

import shlex
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Select, Static

from paradvisor.errors import InputError
from paradvisor.launch.argv import node_commands
from paradvisor.rundir import safe_name
from paradvisor.rundir.from_plan import preset_from_estimate
from paradvisor.shipped import presets_dir as shipped
from paradvisor.spec.preset import load_preset, save_preset
from paradvisor.tui.messages import LaunchRequested, PlanSelected
from paradvisor.tui.panes.later import LaterPane
from paradvisor.tui.text import escape
from paradvisor.units import GiB, fmt_seconds

DEFAULT_PRESET = "tiny-cpu-smoke"  # chosen at start when the presets folder has it


class LaunchPane(LaterPane):
    def __init__(self, *, presets_dir: Path, runs_dir: Path) -> None:
        super().__init__("3 Launch", id="launch")
        self.presets_dir, self.runs_dir = presets_dir, runs_dir
        self.plan: PlanSelected | None = None  # the Plans pane's selection, as last posted

    def content(self) -> ComposeResult:
        opts = self.preset_options()
        smoke = next((v for k, v in opts if k == DEFAULT_PRESET), Select.NULL)
        with VerticalScroll():
            with Horizontal(classes="row"):
                yield Select(
                    opts, id="preset-select", allow_blank=True, prompt="choose a preset", value=smoke
                )
                yield Button("Launch preset", id="launch-preset", variant="success")
            yield Static(id="launch-msg")
            yield Static(id="launch-plan", classes="panel")
            with Horizontal(classes="row"):
                yield Input(placeholder="preset name to save the selected plan as", id="preset-name")
                yield Button("Save preset", id="save-preset")
                yield Button("Launch plan", id="launch-plan-btn")
            yield Static(id="launch-command", classes="panel")

    # ------------------------------------------------------------------------------------------ widgets
    @property
    def preset_select(self) -> Select:
        return self.query_one("#preset-select", Select)

    @property
    def main_widget(self) -> Select:
        return self.preset_select

    @property
    def message_line(self) -> Static:
        return self.query_one("#launch-msg", Static)

    def preset_options(self) -> list[tuple[str, str]]:
        """The presets in the save folder, then the shipped ones not shadowed by a saved one of that name."""
        seen: dict[str, str] = {}
        for folder in (self.presets_dir, shipped()):
            if folder.is_dir():
                for p in sorted(folder.glob("*.toml")):
                    seen.setdefault(p.stem, str(p))
        return [(escape(stem), path) for stem, path in seen.items()]

    # ----------------------------------------------------------------------------------------- handlers
    @on(Button.Pressed, "#launch-preset")
    def _launch_preset_pressed(self) -> None:
        self.launch_preset()

    @on(Button.Pressed, "#launch-plan-btn")
    def _launch_plan_pressed(self) -> None:
        self.launch_plan()

    @on(Button.Pressed, "#save-preset")
    def _save_pressed(self) -> None:
        self.save_preset()

    # ------------------------------------------------------------------------------------ the plan shown
    def on_built(self) -> None:
        if self.plan is not None:  # selected before the widgets were there
            self.show_plan(self.plan)

    def show_plan(self, plan: PlanSelected) -> None:
        """The selected plan, its layout and prediction, and the command each node runs."""
        self.plan = plan
        if not self.built:  # kept: shown once built
            return
        if plan.entry is None or plan.rec is None:
            self.query_one("#launch-plan", Static).update("No plan selected: rank plans in tab 2.")
            return
        pr = self.plan_preset()
        e, rec = plan.entry, plan.rec
        self.query_one("#launch-plan", Static).update(
            f"[b]selected plan:[/b] {escape(e.plan.label())} for {escape(rec.profile.name)} on "
            f"{escape(rec.cluster.name)} ({pr.launch.layout()}); predicted "
            f"{e.memory_total / GiB:.1f} GiB/GPU, step {fmt_seconds(e.step_time)}"
        )
        lines = []
        for host, argv in node_commands(pr, str(self.runs_dir / f"<timestamp>-{pr.name}"), python="python"):
            lines.append(
                (f"[b]{escape(host)}:[/b] " if pr.launch.nnodes > 1 else "") + escape(shlex.join(argv))
            )
        self.query_one("#launch-command", Static).update("[b]command:[/b]\n" + "\n".join(lines))

    def plan_preset(self):
        """The selected plan as a launchable preset (single-node clusters run here; others export)."""
        plan = self.plan
        typed = self.query_one("#preset-name", Input).value.strip()
        return preset_from_estimate(
            plan.rec,
            plan.entry,
            plan.cluster_ref,
            name=safe_name(typed, "plan") if typed else None,
            description=f"{plan.rec.profile.name}: {plan.entry.plan.label()} (from the TUI)",
        )

    def _has_plan(self) -> bool:
        if self.plan is None or self.plan.entry is None:
            self.notify("no plan selected", severity="warning")
            return False
        return True

    # ------------------------------------------------------------------------------------------ actions
    def save_preset(self) -> None:
        """The selected plan into the user's preset folder as `<name>.toml` (the name rule of run directories:
        rundir.safe_name), then chosen in the preset list so that L starts it."""
        if not self._has_plan():
            return
        pr = self.plan_preset()
        path = self.presets_dir / f"{pr.name}.toml"
        try:
            self.presets_dir.mkdir(parents=True, exist_ok=True)
            save_preset(path, pr.to_doc())
        except InputError as exc:
            self.notify(escape(exc), severity="error")
            return
        except OSError as exc:
            self.notify(escape(f"cannot save {path}: {exc.strerror or exc}"), severity="error")
            return
        self.preset_select.set_options(self.preset_options())
        self.preset_select.value = str(path)
        self.message_line.update(f"saved {escape(path)}")
        self.notify(f"saved {escape(path)}")

    def launch_preset(self) -> None:
        value = self.preset_select.value
        if self.preset_select.is_blank() or not isinstance(value, str):
            self.notify("choose a preset first", severity="warning")
            return
        self.show_working(f"reading {value}…")
        self._read_preset(str(value))

    @work(thread=True, exclusive=True, group="read-preset")
    def _read_preset(self, path: str) -> None:
        """The preset file is read (and checked) in a worker, never on the UI thread."""
        try:
            preset = load_preset(path)
        except InputError as exc:
            self.app.call_from_thread(self.show_error, exc)
            return
        self.post_message(LaunchRequested(preset))  # thread-safe

    def launch_plan(self) -> None:
        if not self._has_plan():
            return
        try:
            self.post_message(LaunchRequested(self.plan_preset()))
        except InputError as exc:
            self.show_error(exc)

    def show_working(self, what: str | None) -> None:
        """The visible working state while a worker reads, checks, predicts or starts (None: done)."""
        self.message_line.update("" if what is None else f"[yellow]{escape(what)}[/yellow]")

    def show_error(self, exc: Exception) -> None:
        self.message_line.update(f"[red]{escape(exc)}[/red]")
        self.notify(escape(exc), severity="error", timeout=8)

    def show_started(self, name: str, run_dir: Path) -> None:
        """A run was started: it is starting (its ranks may still fail at once), not yet "launched"."""
        self.message_line.update(f"starting {escape(name)}: {escape(run_dir)} (tab 4 follows it)")

    def show_ended(self, name: str, run_dir: Path, status: dict) -> None:
        """The run ended: how (a run that failed at once says so here, with why)."""
        state = str(status.get("status"))
        tone = {"finished": "green", "cancelled": "yellow"}.get(state, "red")
        why = status.get("reason") if state != "finished" else None
        self.message_line.update(
            f"[{tone}]{escape(name)} {escape(state)}[/{tone}]: {escape(run_dir)}"
            + (f" — {escape(why)}" if why else "")
        )
