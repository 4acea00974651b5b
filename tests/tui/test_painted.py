"""A worker's long computation does not run beside the UI thread's costly turns (issue 32 goal 5): the Launch
and Plans tabs are mounted once the first ranking is done (startup.first_ranking_done), the launch prediction
starts once its question has been painted (the worker waits for the question's mount), and a ranking does not
write the model's line again when it did not change."""

from __future__ import annotations

import asyncio

import pytest
from textual.screen import Screen

from paradvisor.tui.app import ParadvisorApp
from tests.tui.test_workers import C000, until


@pytest.fixture
def layouts(monkeypatch) -> list[tuple[str, set[str]]]:
    """Each layout and paint of a screen from now on: (the screen's class, the classes of the widgets it shows)."""
    seen: list[tuple[str, set[str]]] = []
    real = Screen._refresh_layout

    def spy(self, *a, **k):
        real(self, *a, **k)
        seen.append((type(self).__name__, {type(w).__name__ for w in self._compositor.visible_widgets}))

    monkeypatch.setattr(Screen, "_refresh_layout", spy)
    return seen


def spy_on(monkeypatch, module, name: str, before, after=None) -> None:
    """`module.name` calls `before()` as it starts and `after()` as it returns (on the caller's thread)."""
    real = getattr(module, name)

    def wrapped(*a, **k):
        before()
        try:
            return real(*a, **k)
        finally:
            if after is not None:
                after()

    monkeypatch.setattr(module, name, wrapped)


def test_the_prediction_starts_once_the_question_is_painted(tmp_path, monkeypatch, layouts):
    from paradvisor.monitor import predict
    from paradvisor.tui.screens import ConfirmLaunchScreen

    at_prediction: list[bool] = []  # had the question been laid out and painted when the prediction started?
    spy_on(
        monkeypatch,
        predict,
        "launch_prediction",
        lambda: at_prediction.append(any(screen == "ConfirmLaunchScreen" for screen, _ in layouts)),
    )

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            await pilot.press("2")
            await until(pilot, lambda: app.launcher.plan is not None and app.launcher.built)
            app.action_launch_plan()
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            await until(pilot, lambda: "predicted memory" in str(app.screen.text))
            await pilot.press("escape")

    asyncio.run(flow())
    assert at_prediction == [True]


def test_the_launch_and_plans_tabs_are_mounted_once_the_first_ranking_is_done(tmp_path, monkeypatch):
    from paradvisor.plan import advice
    from paradvisor.tui.panes.later import LaterPane

    order: list[str] = []
    spy_on(monkeypatch, advice, "advise", lambda: order.append("ranking"), lambda: order.append("ranked"))
    real_mount = LaterPane._mount_parts

    async def mount(self):
        order.append(f"mount {self.id}")
        await real_mount(self)

    monkeypatch.setattr(LaterPane, "_mount_parts", mount)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and app.plans.built)

    asyncio.run(flow())
    assert order[:4] == ["ranking", "ranked", "mount launch", "mount plans"], order


def test_a_ranking_that_keeps_the_model_does_not_write_its_line_again(tmp_path, monkeypatch):
    """Each ranking reads the model's profile and shows its line as it starts, in a turn of its own beside the
    ranking's worker; the same line is not written again (an update lays the whole screen out: widgets.show_text)."""
    from textual.widgets import Static

    written: list[str] = []
    real = Static.update

    def spy(self, *a, **k):
        if self.id == "profile":
            written.append(str(a[0] if a else k.get("content")))
        return real(self, *a, **k)

    monkeypatch.setattr(Static, "update", spy)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            await pilot.press("2")
            for _ in range(2):  # r: ranked again, the same model
                gen = app.plans._generation
                await pilot.press("r")
                await until(
                    pilot, lambda gen=gen: app.plans._generation > gen and app.plans.ranking.is_finished
                )
            await until(pilot, lambda: not app.plans.table.loading)
            assert "bert-base-uncased" in str(app.query_one("#profile").render())

    asyncio.run(flow())
    assert len(written) == 1 and "bert-base-uncased" in written[0], written


def test_a_ranking_shown_before_the_plans_tab_is_built_mounts_no_loading_indicator(tmp_path, monkeypatch):
    """What a ranking showed before the Plans tab's widgets existed is shown once they do, the latest of each
    kind; its plans end its loading state, so the loading indicator is not mounted (and removed) at all."""
    from paradvisor.tui.panes.plans import PlansPane

    loading: list[bool] = []
    real = PlansPane.show_ranking

    def spy(self, busy: bool) -> None:
        loading.append(busy)
        real(self, busy)

    monkeypatch.setattr(PlansPane, "show_ranking", spy)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.rec is not None and app.plans.built)
            assert app.plans.table.row_count == len(app.rec.plans) > 0
            assert "bert-base-uncased" in str(app.query_one("#profile").render())

    asyncio.run(flow())
    assert loading == [False], loading
