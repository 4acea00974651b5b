"""The paradvisor Textual app: hardware -> workload -> ranked plans -> launch -> live monitor.

The app is the shell: key bindings, the tabs, and the routing of the panes' messages (panes/: one module
per tab). It owns what outlives a tab: the run started here (its confirmation, the worker waiting for it,
stopping it when the session closes) and the sampler of this machine's readings. Everything slow runs in
workers; the advice layers are pure, so re-ranking on every change does not freeze the UI. Styles live in
paradvisor.tcss.
"""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import App, ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Header, Input, TabbedContent

from paradvisor.errors import InputError

if TYPE_CHECKING:
    from paradvisor.monitor.follow import RunSummary
from concurrent.futures import CancelledError

from paradvisor.monitor.sampler import SamplerThread
from paradvisor.plan.view import plan_rows
from paradvisor.spec.preset import user_presets_dir
from paradvisor.tui.messages import ClusterChanged, LaunchRequested, PlanSelected, StopRequested
from paradvisor.tui.panes import HardwarePane, LaunchPane, MonitorPane, PlansPane
from paradvisor.tui.panes.hardware import reading_text
from paradvisor.tui.panes.later import LaterPane
from paradvisor.tui.runs import RunControl
from paradvisor.tui.screens import EditPlanScreen, HelpScreen
from paradvisor.tui.startup import first_ranking_done, freeze_startup_objects, with_breakpoint_classes
from paradvisor.tui.widgets import SteadyFooter

Pane = HardwarePane | PlansPane | LaunchPane | MonitorPane


class ParadvisorApp(RunControl, App):
    TITLE = "paradvisor"
    SUB_TITLE = "distributed-training advisor"
    CSS_PATH = "paradvisor.tcss"
    # The tab labels carry their digit ("1 Hardware"), so the footer does not repeat them. A digit typed
    # while a text box has focus goes into the box (numbers, paths); Enter or Esc leaves the box, and
    # F1-F4 switch tabs from anywhere, text box or not.
    BINDINGS = [
        Binding("1", "tab('hardware')", "Hardware", show=False),
        Binding("2", "tab('plans')", "Plans", show=False),
        Binding("3", "tab('launch')", "Launch", show=False),
        Binding("4", "tab('monitor')", "Monitor", show=False),
        Binding("f1", "tab('hardware')", "Hardware", show=False, priority=True),
        Binding("f2", "tab('plans')", "Plans", show=False, priority=True),
        Binding("f3", "tab('launch')", "Launch", show=False, priority=True),
        Binding("f4", "tab('monitor')", "Monitor", show=False, priority=True),
        # Tab moves focus as the app reads the key (priority), not once the key has bubbled back up from the
        # box: keys typed right after a Tab (a fast typist, a paste of "256<Tab>32") go into the next box.
        Binding("tab", "focus_next", "Next", show=False, priority=True),
        Binding("shift+tab", "focus_previous", "Previous", show=False, priority=True),
        Binding("escape", "leave_box", "Leave box", key_display="esc"),
        Binding(
            "r", "rerank", "Re-rank", show=False
        ),  # every change re-ranks by itself: the footer's room goes to the plan's keys
        Binding("i", "infeasible", "Not fitting"),
        Binding("e", "edit_plan", "Edit plan", show=False),
        # L: the preset chosen on the Launch tab; on the Plans tab (where that preset is not on screen) the
        # plan the user is looking at: the first binding is off there, and the key falls through to the second.
        Binding("L", "launch_preset", "Launch preset"),
        Binding("L", "launch_plan", "Launch plan", show=False),
        Binding("P", "launch_plan", "Launch plan"),
        Binding("ctrl+s", "save_preset", "Save"),
        Binding("v", "monitor_view", "View"),
        Binding("s", "stop_run", "Stop"),
        Binding("R", "launch_replan", "Launch re-plan", show=False),
        Binding("u", "resume_run", "Resume"),  # the run on the Monitor tab, from its newest checkpoint
        Binding("t", "toggle_theme", "Theme", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]
    AUTO_FOCUS = "#hw-table"  # never a text box: a digit pressed first switches tabs
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]

    def __init__(
        self,
        *,
        cluster: str | None = None,
        model: str = "bert-base-uncased",
        runs_dir: str = "runs",
        presets_dir: str | None = None,
        sample_interval: float = 1.0,
        live: bool = True,
        open_run: str | None = None,
        confirm: bool = True,
    ):
        super().__init__()
        self.confirm = (
            confirm  # ask before a run starts (the confirmation shows the command and the prediction)
        )
        self.open_run = open_run
        self.cluster_arg, self.model_arg, self.runs_dir = cluster, model, Path(runs_dir)
        # where ctrl+s saves (and the Launch tab lists first, above the shipped presets)
        self.presets_dir = Path(presets_dir) if presets_dir else user_presets_dir()
        self.sample_interval, self.live = sample_interval, live
        self.launch = None  # launch.runner.Launch of the run started here, while the session lasts
        self._starting = False  # a start is under way in a worker
        self.samples: list[dict] = []  # this machine's latest readings (monitor.sampler), newest last
        self.sampler = None  # monitor.sampler.SamplerThread when live

    def get_default_screen(self) -> Screen:
        """The main screen, with the breakpoint classes of the terminal's size on it before its first restyle."""
        return with_breakpoint_classes(self, super().get_default_screen())

    def push_screen(self, screen, *args, **kwargs):
        """A window over the main screen, with its breakpoint classes on it before its first restyle too."""
        return super().push_screen(with_breakpoint_classes(self, screen), *args, **kwargs)

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="monitor" if self.open_run else "hardware", id="tabs"):
            yield HardwarePane()
            yield PlansPane(model=self.model_arg)
            yield LaunchPane(presets_dir=self.presets_dir, runs_dir=self.runs_dir)
            yield MonitorPane(open_run=self.open_run)
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.theme = "textual-dark"
        if self.cluster_arg:
            self.hardware.path_box.value = self.cluster_arg
            self.hardware.load_cluster(self.cluster_arg)
        else:
            self.hardware.detect_local()
        if self.live:
            self.start_sampler()
        if self.open_run:  # --open RUN_DIR: the session opens on that run (focus too: see action_tab)
            self.call_after_refresh(self.action_tab, "monitor")
        self.call_after_refresh(self.build_panes)

    async def build_panes(self) -> None:
        """The Launch and Plans tabs' widgets, mounted once the first tab is on screen (panes/later.py) and the
        first ranking has ended (first_ranking_done), each in its own turns of the event loop, a widget at a
        time (the Plans tab last: it shows the ranking); then what exists is frozen (freeze_startup_objects)."""
        try:
            await first_ranking_done(self.plans)
            await self.launcher.build()
            await self.plans.build()
        except (NoMatches, ScreenStackError):  # the session closed at once
            return
        freeze_startup_objects()

    # --------------------------------------------------------------------------------------------- panes
    def _w(self, selector, expect_type=None):
        """A widget of the main screen (timers and workers may fire while a modal screen is on top)."""
        base = self.screen_stack[0] if self.screen_stack else self.screen
        return base.query_one(selector, expect_type) if expect_type else base.query_one(selector)

    @property
    def tabs(self) -> TabbedContent:
        return self._w("#tabs", TabbedContent)

    @property
    def hardware(self) -> HardwarePane:
        return self._w(HardwarePane)

    @property
    def plans(self) -> PlansPane:
        return self._w(PlansPane)

    @property
    def launcher(self) -> LaunchPane:
        return self._w(LaunchPane)

    @property
    def monitor(self) -> MonitorPane:
        return self._w(MonitorPane)

    def pane(self, tab: str) -> Pane:
        return {
            "hardware": self.hardware,
            "plans": self.plans,
            "launch": self.launcher,
            "monitor": self.monitor,
        }.get(tab) or self.hardware

    # What the panes hold, read where the whole session is looked at (the tests, the sampler).
    @property
    def cluster(self):
        return self.hardware.cluster

    @property
    def rec(self):
        return self.plans.rec

    @property
    def selected(self):
        return self.plans.selected

    @property
    def run_dir(self) -> Path | None:
        return self.monitor.run_dir

    @property
    def run_summary(self) -> RunSummary | None:
        return self.monitor.run_summary

    def moved_by_rules(self) -> dict[str, tuple[int, list[str]]]:
        """label -> (rank by the cost model alone, the rules that moved it) for plans the rules moved."""
        rows = plan_rows(self.plans.rec) if self.plans.rec else []
        return {r.label: (r.cost_rank, list(r.moved_by)) for r in rows if r.moved}

    def load_cluster(self, path: str) -> None:
        self.hardware.load_cluster(path)

    def refresh_monitor(self) -> None:
        self.monitor.refresh_run()

    # ------------------------------------------------------------------------------------------ messages
    @on(ClusterChanged)
    def _cluster_changed(self, message: ClusterChanged) -> None:
        try:
            self.plans.set_cluster(message.cluster, message.ref)
        except (NoMatches, ScreenStackError):  # a cluster file read in a worker as the session closed
            pass

    @on(PlanSelected)
    def _plan_selected(self, message: PlanSelected) -> None:
        try:
            self.launcher.show_plan(message)
        except (NoMatches, ScreenStackError):  # a ranking that ended as the session closed
            pass

    @on(LaunchRequested)
    def _launch_requested(self, message: LaunchRequested) -> None:
        try:
            self.ask_to_start(message.preset)
        except InputError as exc:
            self.launcher.show_error(exc)

    @on(StopRequested)
    def _stop_requested(self) -> None:
        self.action_stop_run()

    @on(Input.Submitted)
    def _leave_after_submit(self) -> None:
        self.call_after_refresh(self.action_leave_box)  # Enter leaves the box: digits switch tabs again

    def on_resize(self) -> None:
        try:
            self.plans.relayout()
        except (NoMatches, ScreenStackError):  # before the tabs exist
            pass

    # ------------------------------------------------------------------------------------------- the run
    def exit(self, *args, **kwargs) -> None:
        if self.sampler is not None:  # no reading may arrive while the screens close
            self.sampler.stop()
        super().exit(*args, **kwargs)

    def on_unmount(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.launch is not None and not self.launch.done.is_set():
            # Closing the session stops its run: every rank ends and status.json says so before we leave
            # (the waiting worker writes it; bounded, in case a rank ignores SIGTERM and needs SIGKILL).
            self.launch.cancel("the interactive session was closed")
            self.launch.done.wait(timeout=30)

    # --------------------------------------------------------------------------------------- the sampler
    def start_sampler(self) -> None:
        monitor = self.monitor  # read from the sampler's thread: no query there

        def ranks_of():  # the run whose rank processes the sampler reads (its thread calls this)
            s = monitor.run_summary
            return (monitor.run_dir, max(1, int(s.world_size or 1))) if monitor.run_dir and s else None

        def deliver(s: dict) -> None:  # the sampler's thread
            try:
                self.call_from_thread(self.on_sample, s)
            except (CancelledError, RuntimeError):  # the session closed under the reading: stop quietly
                self.sampler.stop()

        self.sampler = SamplerThread(deliver, self.sample_interval, ranks_of=ranks_of)
        self.sampler.start()

    def on_sample(self, s: dict) -> None:
        if not self.is_running:
            # Shutting down: Textual closes the screens before the App's unmount stops the sampler, and a
            # widget updated in between schedules a refresh that finds no screen (ScreenStackError).
            if self.sampler is not None:
                self.sampler.stop()
            return
        self.samples = (self.samples + [s])[-120:]
        text = reading_text(s)
        try:
            self.hardware.show_readings(text, [x["cpu_pct"] for x in self.samples])
            self.monitor.show_readings("this machine: " + text, s.get("ranks") or {})
        except (NoMatches, ScreenStackError):  # the app is closing
            pass

    # ------------------------------------------------------------------------------------------- actions
    async def action_tab(self, tab: str) -> None:
        # A pane built on first show (the Monitor's) is built before the tab switches, so its widget can take
        # focus. Move focus into the new pane too: a focused widget left in a hidden pane pulls its pane back.
        pane = self.pane(tab)
        if isinstance(pane, LaterPane):
            await pane.build()
        self.tabs.active = tab
        pane.main_widget.focus()
        self.refresh_bindings()

    @on(TabbedContent.TabActivated, "#tabs")
    async def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        """A tab chosen with the mouse: its widgets are built if they are not yet (the Monitor's: the first time
        it shows)."""
        if isinstance(event.pane, LaterPane):
            await event.pane.build()

    def action_leave_box(self) -> None:
        """Esc in a text box: focus goes back to the tab's main widget (digits switch tabs again)."""
        if isinstance(self.focused, Input):
            self.pane(self.tabs.active).main_widget.focus()

    def action_rerank(self) -> None:
        self.plans.rerank()

    def action_infeasible(self) -> None:
        self.plans.show_infeasible()

    def action_edit_plan(self) -> None:
        """Plans tab: the selected plan in an editor that estimates what is typed (EditPlanScreen)."""
        if self.plans.rec is not None and self.plans.selected is not None:
            self.push_screen(EditPlanScreen(self.plans.rec, self.plans.selected.plan))

    def action_save_preset(self) -> None:
        self.launcher.save_preset()

    def action_launch_preset(self) -> None:
        self.launcher.launch_preset()

    def action_launch_plan(self) -> None:
        self.launcher.launch_plan()

    def action_monitor_view(self) -> None:
        self.monitor.cycle_view()

    def check_action(self, action: str, parameters) -> bool | None:
        """Footer entries that apply now: Esc while a text box has focus, View on the Monitor tab, Stop while
        a run goes, Re-rank outside the Monitor tab; on the Plans tab the keys that act on the plan on screen
        (P or L to launch it, i, ctrl+s; Enter is the table's), on the Launch tab the preset's and the plan's."""
        if action == "leave_box":
            return isinstance(self.focused, Input)
        try:
            tab = self.tabs.active
        except (NoMatches, ScreenStackError):  # before the tabs exist
            return True
        if action == "monitor_view":
            return tab == "monitor"
        if action == "rerank":
            return tab != "monitor"
        if action == "edit_plan":
            return tab == "plans"
        if action == "stop_run":
            return self._run_going() or tab == "monitor"
        if action == "resume_run":
            return tab == "monitor" and not self._run_going()
        if action == "launch_preset":
            return tab != "plans"  # there L launches the plan on screen (the next binding of L)
        if action in ("launch_plan", "save_preset"):
            return tab in ("plans", "launch")
        if action == "infeasible":
            return tab == "plans"
        return True

    def watch_focused(self) -> None:
        self.refresh_bindings()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Re-rank plans", "Run the planner again", self.action_rerank)
        yield SystemCommand(
            "Launch selected preset", "Start the preset chosen in the Launch tab", self.action_launch_preset
        )
        yield SystemCommand(
            "Save selected plan as preset",
            f"Write {self.presets_dir}/<name>.toml",
            self.action_save_preset,
        )
        yield SystemCommand("Stop run", "End every rank of the running job", self.action_stop_run)
        yield SystemCommand("Toggle light/dark theme", "Switch the colour theme", self.action_toggle_theme)
