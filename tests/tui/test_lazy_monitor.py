"""The Monitor tab's view is built the first time the tab shows (issue 32, goal 5: every restyle of the whole
screen walks every mounted widget, shown or not), whichever way the tab is opened, and then shows what arrived
before it existed: the state of the run, this machine's latest reading."""

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
