"""The TUI never ranks, reads files, checks a plan or predicts on its UI thread (issue 32): each of those runs
in a worker (the profile, a preset file, a cluster file: the files read), typing is debounced (one ranking when the digits pause, not one per keystroke), and the launch
question appears before its prediction is done (it fills in behind)."""

from __future__ import annotations

import asyncio
import threading

from paradvisor.tui.app import ParadvisorApp
from tests.conftest import EXAMPLES

C000 = str(EXAMPLES / "paper000-two-servers.toml")


async def until(pilot, cond, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await pilot.pause(0.05)


def test_heavy_work_runs_in_workers_and_typing_is_debounced(tmp_path, monkeypatch):
    import paradvisor.launch.runner as runner
    import paradvisor.model.load as load
    import paradvisor.monitor.predict as predict
    import paradvisor.plan.advice as advice
    import paradvisor.tui.panes.hardware as hardware_pane
    import paradvisor.tui.panes.launch as launch_pane

    calls: list[tuple[str, bool]] = []  # (what, on the UI thread?)

    def spy(module, name):
        real = getattr(module, name)

        def wrapped(*a, **k):
            calls.append((name, threading.current_thread() is threading.main_thread()))
            return real(*a, **k)

        monkeypatch.setattr(module, name, wrapped)

    for module, name in (
        (advice, "advise"),
        (load, "load_profile"),
        (runner, "validate"),
        (predict, "launch_prediction"),
        (launch_pane, "load_preset"),  # a preset file (L on the Launch tab)
        # the cluster file (--cluster at start, Load on the Hardware tab)
        (hardware_pane, "resolve_machines"),
    ):
        spy(module, name)

    async def flow():
        presets = tmp_path / "presets"
        presets.mkdir()
        (presets / "broken.toml").write_text("[launch\n")  # read, found broken: an error line, no question
        app = ParadvisorApp(
            cluster=C000,
            runs_dir=str(tmp_path / "runs"),
            model="bert-base-uncased",
            live=False,
            presets_dir=str(presets),
        )
        async with app.run_test(size=(130, 42)) as pilot:
            await until(pilot, lambda: app.rec is not None)
            await pilot.press("2")
            before = sum(1 for n, _ in calls if n == "advise")
            box = app.query_one("#seq-len")
            for typed in ("3", "38", "384"):  # three edits in a row, as fast typing makes them
                box.value = typed
            await until(pilot, lambda: app.rec is not None and app.rec.workload.seq_len == 384)
            await pilot.pause(0.5)
            typed = sum(1 for n, _ in calls if n == "advise") - before
            assert typed == 1, f"{typed} rankings for one typed number"
            from paradvisor.tui.screens import ConfirmLaunchScreen

            app.query_one("#seq-len").value = "128"
            await pilot.press("enter")
            await until(pilot, lambda: app.rec is not None and app.rec.workload.seq_len == 128)
            app.action_launch_plan()
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            await until(pilot, lambda: "predicted memory" in str(app.screen.text))
            await pilot.press("escape")
            assert app.run_dir is None
            app.launcher.preset_select.value = str(presets / "broken.toml")
            app.action_launch_preset()
            line = lambda: str(app.launcher.message_line.render())
            await until(pilot, lambda: "broken.toml:1" in line())  # the error, naming the file and line
            assert not isinstance(app.screen, ConfirmLaunchScreen)

    asyncio.run(flow())
    names = {n for n, _ in calls}
    assert {
        "advise",
        "load_profile",
        "validate",
        "launch_prediction",
        "load_preset",
        "resolve_machines",
    } <= names, names
    on_ui = sorted({n for n, ui in calls if ui})
    assert not on_ui, f"ran on the UI thread: {on_ui}"


def test_a_prediction_that_comes_after_the_answer_is_dropped():
    """The prediction fills the question in from its worker; when the user answered first (y at once), the window
    is closing and its widgets go a few loop turns before the window itself: the late text is kept on the
    screen object, never an error (it ended the session with WorkerFailed)."""
    from textual.app import App

    from paradvisor.tui.screens import ConfirmLaunchScreen

    async def flow():
        app = App()
        async with app.run_test() as pilot:
            screen = ConfirmLaunchScreen("Start tiny-cpu-smoke?")
            await app.push_screen(screen)
            await pilot.pause(0.05)
            screen.action_answer(True)
            turns = 0
            while screen.is_attached:  # every turn of the closing, as a worker's call may land on any
                screen.set_text("Start tiny-cpu-smoke? predicted memory: 1 GiB")
                turns += 1
                await asyncio.sleep(0)
            assert turns > 1 and screen.text.endswith("predicted memory: 1 GiB")

    asyncio.run(flow())
