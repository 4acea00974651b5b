"""Issue 31 item 1 in the TUI: "edit this plan" on the Plans tab estimates the edited plan with the same code
as `paradvisor estimate` (the same numbers as the ranked plan before any edit)."""

from __future__ import annotations

import asyncio

from paradvisor.tui.app import ParadvisorApp
from paradvisor.tui.screens import EditPlanScreen
from tests.conftest import EXAMPLES

CLUSTER = str(EXAMPLES / "paper000-two-servers.toml")


def test_edit_this_plan_estimates_what_is_typed(tmp_path):
    async def flow():
        app = ParadvisorApp(runs_dir=str(tmp_path / "runs"), model="bert-base-uncased", live=False)
        async with app.run_test(size=(130, 42)) as pilot:
            await pilot.pause(0.3)
            await app.workers.wait_for_complete()
            app.query_one("#cluster-path").focus()
            await pilot.press(*CLUSTER)
            await pilot.click("#load-cluster")
            await pilot.pause(0.3)
            await app.workers.wait_for_complete()
            await pilot.press("2")
            await pilot.pause(0.3)
            await app.workers.wait_for_complete()
            assert app.rec is not None and app.rec.plans
            first = app.plans.selected
            app.plans.main_widget.focus()
            await pilot.press("e")
            await pilot.pause(0.3)
            screen = app.screen
            assert isinstance(screen, EditPlanScreen)
            assert screen.estimate.step_time == first.step_time
            assert screen.estimate.memory_total == first.memory_total
            box = screen.query_one("#plan-edit")
            box.value = "pp=2,micro_batch=1,pp_schedule=interleaved1f1b,pp_virtual_stages=2"
            await pilot.press("enter")
            await pilot.pause(0.2)
            p = screen.estimate.plan
            assert (p.pp, p.pp_virtual_stages, p.dp) == (2, 2, 3) and screen.error is None
            box.value = "tp=5"
            await pilot.press("enter")
            await pilot.pause(0.2)
            assert "tp 5 does not divide the 12 attention heads" in screen.error
            await pilot.press("escape")

    asyncio.run(flow())
