"""The Monitor tab's view is built the first time the tab shows (issue 32, goal 5: every restyle of the whole
screen walks every mounted widget, shown or not), whichever way the tab is opened, and then shows what arrived
before it existed: the state of the run, this machine's latest reading. The Plans and Launch tabs' widgets are
mounted after the first paint (panes/later.py) and show the ranking and the plan asked for before."""

from __future__ import annotations

import asyncio

from paradvisor.tui.app import ParadvisorApp
from paradvisor.tui.runview import RunView
from tests.tui.test_workers import C000, until

READING = {"cpu_pct": 42.0, "ram_used_bytes": 2**30, "ram_total_bytes": 2**33, "gpus": [], "ranks": {}}


def test_monitor_view_is_built_when_its_tab_first_shows(tmp_path):
    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
            assert not app.query(RunView) and not app.query("#run-status")
            app.on_sample(READING)  # a reading that arrives before the tab was ever shown
            await pilot.press("4")
            await until(pilot, lambda: app.tabs.active == "monitor")
            assert len(app.query(RunView)) == 1
            assert app.focused is app.monitor.main_widget
            assert "No run yet" in str(app.query_one("#run-status").render())
            assert "this machine: CPU 42%" in str(app.query_one("#run-live").render())
            await pilot.press("1", "4")  # shown again: the same view, not a second one
            await until(pilot, lambda: app.tabs.active == "monitor")
            assert len(app.query(RunView)) == 1

    asyncio.run(flow())


def test_monitor_view_is_built_when_its_tab_is_clicked(tmp_path):
    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
            assert not app.query(RunView)
            await pilot.click("#--content-tab-monitor")
            await until(pilot, lambda: bool(app.query("#run-status")))
            assert app.tabs.active == "monitor"
            await until(pilot, lambda: "No run yet" in str(app.query_one("#run-status").render()))

    asyncio.run(flow())


def test_plans_and_launch_widgets_come_after_the_first_paint(tmp_path, monkeypatch):
    """The screen's first restyle (in the same loop turn as its first layout and paint) walks the first tab's
    widgets, not the Plans and Launch tabs'; the ranking the cluster asked for at start, and the plan it selects,
    are shown once those are mounted."""
    from textual.css.stylesheet import Stylesheet

    walked: list[set] = []
    real = Stylesheet.update_nodes

    def spy(self, nodes, animate=False):
        nodes = list(nodes)
        walked.append({n.id for n in nodes})
        return real(self, nodes, animate=animate)

    monkeypatch.setattr(Stylesheet, "update_nodes", spy)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            first = next(
                ids for ids in walked if {"_default", "hw-table"} <= ids
            )  # the first whole-screen restyle
            assert not {"seq-len", "plans-table", "preset-select", "launch-plan"} & first
            # and only one: the breakpoint classes (-wide -tall) are on the screen before it, so the first Resize
            # does not restyle every widget again
            assert sum(1 for ids in walked if {"_default", "hw-table"} <= ids) == 1
            assert app.plans.table.row_count == len(app.rec.plans) > 0
            await until(pilot, lambda: "selected plan:" in str(app.query_one("#launch-plan").render()))
            assert app.rec.plans[0].plan.label() in str(app.query_one("#launch-plan").render())

    asyncio.run(flow())


def test_a_ranking_done_before_the_plans_widgets_is_shown_once_they_are(tmp_path, monkeypatch):
    """The first ranking starts at once, from the values the boxes will hold (the model asked for); when it ends
    before the Plans tab's widgets are mounted, what it shows is kept and shown when they are, and the Launch
    tab shows the plan it selected."""
    real_build = ParadvisorApp.build_panes

    async def late_build(self):
        # the first ranking has been asked for and has ended: nothing to show it in yet
        while not (self.plans._generation and all(w.is_finished for w in self.workers)):
            await asyncio.sleep(0.05)
        assert self.rec is None and not self.plans.built
        await real_build(self)

    monkeypatch.setattr(ParadvisorApp, "build_panes", late_build)

    async def flow():
        app = ParadvisorApp(cluster=C000, model="gpt2", runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None)
            assert app.rec.profile.name == "gpt2" and str(app.query_one("#model").value) == "gpt2"
            assert app.plans.table.row_count == len(app.rec.plans) > 0 and not app.plans.table.loading
            assert "gpt2" in str(app.query_one("#profile").render())
            await until(pilot, lambda: "selected plan:" in str(app.query_one("#launch-plan").render()))

    asyncio.run(flow())


def test_a_tables_cells_are_rendered_once_when_it_first_shows(tmp_path, monkeypatch):
    """The Hardware table at start and the plans table when its tab first shows: each visible cell goes through
    rich once (Textual's DataTable rendered them all again on the Resize just after its first paint)."""
    from paradvisor.tui.widgets import SteadyTable

    rendered: dict[str, list] = {}
    real = SteadyTable._render_cell

    def spy(self, row, column, *a, **k):
        # from its first paint with rows (the cluster file is read in a worker: the Hardware table's header may be
        # painted before the rows come, and again with them)
        filled = self.row_count > 0
        if (
            filled
            and self.id in ("hw-table", "plans-table")
            and (row, column, self._update_count) not in self._seen
        ):
            self._seen.add((row, column, self._update_count))
            rendered.setdefault(self.id, []).append((row, column))
        return real(self, row, column, *a, **k)

    monkeypatch.setattr(SteadyTable, "_seen", set(), raising=False)
    monkeypatch.setattr(SteadyTable, "_render_cell", spy)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            await pilot.pause(0.3)
            await pilot.press("2")
            await until(pilot, lambda: "plans-table" in rendered)
            await pilot.pause(0.3)
            for table in ("hw-table", "plans-table"):
                cells = rendered[table]
                assert cells and len(cells) == len(set(cells)), f"{table}: cells rendered twice"

    asyncio.run(flow())


def test_the_plans_tabs_first_paint_is_the_table_then_its_stages(tmp_path):
    """The Plans tab's first show paints its table, the workload boxes and the plan's panels kept hidden in their
    room (panes/later.py STAGES); each stage is then shown a paint after the one before, and stays shown."""
    stages = [("#workload-row", "#workload", "#profile"), ("#memory-bar", "#plan-info")]

    def hidden(app, stage):
        return [app.query_one(s).styles.get_rule("visibility") == "hidden" for s in stage]

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            assert all(hidden(app, stages[0]) + hidden(app, stages[1]))
            painted: list[set] = []  # what each layout and paint from now on showed

            def layout(screen) -> None:
                painted.append(set(screen._compositor.visible_widgets))

            app.screen.screen_layout_refresh_signal.subscribe(app, layout, immediate=True)
            await pilot.press("2")
            await until(pilot, lambda: not any(hidden(app, stages[0]) + hidden(app, stages[1])))
            await pilot.pause(0.2)
            shown = app.screen._compositor.visible_widgets
            assert {
                app.query_one(s) for s in ("#seq-len", "#workload", "#memory-bar", "#plan-reason")
            } <= set(shown)
            await pilot.press("1", "2")  # shown again: all at once, nothing hidden
            await pilot.pause(0.2)
            assert not any(hidden(app, stages[0]) + hidden(app, stages[1]))

    asyncio.run(flow())


def test_the_footer_is_composed_again_only_when_its_keys_change(tmp_path, monkeypatch):
    """A refresh of the bindings that leaves the footer's keys as they are does not rebuild its key widgets;
    one that changes them does (the Plans tab shows "Not fitting"), each new key composed with the footer's
    `compact` (not restyled as it flips from FooterKey's default to the footer's value)."""
    from textual.css.stylesheet import Stylesheet

    from paradvisor.tui.widgets import SteadyFooter

    recomposed, restyled = [], []
    real = SteadyFooter.recompose
    real_update = Stylesheet.update_nodes

    def update_spy(self, nodes, animate=False):
        nodes = list(nodes)
        restyled.extend(type(n).__name__ for n in nodes)
        return real_update(self, nodes, animate=animate)

    monkeypatch.setattr(Stylesheet, "update_nodes", update_spy)

    async def spy(self):
        recomposed.append(self.screen)
        return await real(self)

    monkeypatch.setattr(SteadyFooter, "recompose", spy)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            await pilot.pause(0.3)
            recomposed.clear()
            restyled.clear()
            app.refresh_bindings()
            await pilot.pause(0.2)
            assert recomposed == []
            await pilot.press("2")
            await until(pilot, lambda: "Not fitting" in [k.description for k in app.query("FooterKey")])
            await pilot.pause(0.3)
            # one: the palette's key (not bound to the footer's `compact`: it keeps FooterKey's default)
            assert len(recomposed) == 1 and restyled.count("FooterKey") == 1

    asyncio.run(flow())
