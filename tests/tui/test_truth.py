"""The interactive session tells the truth (issue 34, item 3): what a key starts, where a preset is saved,
which tab a run opens on, what the boxes, the clock and the Launch tab's line say. Each test drives the app
through Textual's Pilot, as a person would."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest
from textual import events

from paradvisor.tui.app import ParadvisorApp
from paradvisor.tui.screens import ConfirmLaunchScreen
from paradvisor.units import fmt_seconds
from tests.conftest import EXAMPLES, REPO
from tests.support.runs import ONE_RANK, variant
from tests.tui.test_tui import _footer_keys, settle, until, wait_status

C000 = str(EXAMPLES / "paper000-two-servers.toml")
C000_SHOWN = "examples/clusters/paper000-two-servers.toml"


def two_t4(tmp_path: Path) -> str:
    """A one-node cluster whose plans launch here (their ranks run on CPU processes)."""
    path = tmp_path / "two.toml"
    path.write_text('name = "two-t4"\n[[node]]\nname = "box"\ngpus = [{ type = "T4", count = 2 }]\n')
    return str(path)


async def ranked(app, pilot, model: str = "gpt-mini", seq: str = "32", batch: str = "8") -> None:
    """The Plans tab with `model` ranked for a small workload."""
    await settle(app, pilot)
    await pilot.press("2")
    app.query_one("#model").value = model
    app.query_one("#seq-len").value = seq
    app.query_one("#global-batch").value = batch
    await until(
        pilot,
        lambda: (
            app.rec is not None and app.rec.profile.name == model and app.rec.workload.seq_len == int(seq)
        ),
        timeout=60,
    )
    await settle(app, pilot)


def test_L_on_the_plans_tab_launches_the_plan_on_screen_and_the_footer_shows_the_plan_keys(tmp_path):
    """On the Plans tab L asks to start the plan the user is looking at (not the preset chosen on the Launch
    tab), and the footer shows the keys that act there: Enter, P, i, ctrl+s, with Help and Quit still on
    screen at 80 columns."""
    from textual.widgets._footer import FooterKey

    async def flow():
        app = ParadvisorApp(cluster=two_t4(tmp_path), runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await ranked(app, pilot)
            app.query_one("#plans-table").focus()
            await pilot.pause(0.1)
            keys = _footer_keys(app)
            for key in ("⏎", "P", "i", "^s", "?", "q"):
                assert key in keys, keys
            assert all(k.region.right <= 80 for k in app.screen.query(FooterKey))
            label = app.selected.plan.label()
            await pilot.press("L")
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            question = app.screen.text
            assert label in question and "tiny-cpu-smoke" not in question, question
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, ConfirmLaunchScreen))
            # On the Launch tab L is still the preset chosen there
            await pilot.press("3")
            assert "L" in _footer_keys(app)
            await pilot.press("L")
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            assert "Start tiny-cpu-smoke?" in app.screen.text
            await pilot.press("escape")
            assert app.run_dir is None

    asyncio.run(flow())


def test_ctrl_s_saves_into_the_users_preset_folder_under_the_run_directory_name_rule(tmp_path, monkeypatch):
    """ctrl+s writes the plan into ~/.config/paradvisor/presets ($XDG_CONFIG_HOME), never into the checkout;
    its file name follows the run directory's name rule; `--preset NAME` finds it; and L then starts it
    (it failed with `Select.NULL: file not found`)."""
    from paradvisor.rundir import new_run_dir
    from paradvisor.spec.preset import resolve_preset

    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    shipped = sorted(p.name for p in (REPO / "presets").iterdir())
    saved = config / "paradvisor" / "presets" / "my-plan-x.toml"

    async def flow():
        app = ParadvisorApp(cluster=two_t4(tmp_path), runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await ranked(app, pilot)
            await pilot.press("3")
            app.query_one("#preset-name").value = "my plan+x"
            app.query_one("#preset-select").focus()
            await pilot.press("ctrl+s")
            await until(pilot, saved.exists)
            assert saved.exists(), list(config.rglob("*"))
            await pilot.press("L")
            await until(
                pilot,
                lambda: (
                    isinstance(app.screen, ConfirmLaunchScreen)
                    or "Select" in str(app.query_one("#launch-msg").render())
                ),
            )
            assert isinstance(app.screen, ConfirmLaunchScreen), str(app.query_one("#launch-msg").render())
            assert "Start my-plan-x?" in app.screen.text
            await pilot.press("escape")

    try:
        asyncio.run(flow())
    finally:  # whatever the code under test did, the checkout's presets stay as shipped
        for p in (REPO / "presets").iterdir():
            if p.name not in shipped:
                p.unlink()
    assert sorted(p.name for p in (REPO / "presets").iterdir()) == shipped
    assert resolve_preset("my-plan-x") == saved
    assert new_run_dir(tmp_path / "runs", "my plan+x").name.endswith("-my-plan-x")


def _run_dir(tmp_path: Path, *, started: float, ended: float | None, first_record: float | None) -> Path:
    """A run directory: status.json (running, or ended with its duration) and the ranks' first records."""
    from tests.support.tui_scenes import write_demo_run

    run = write_demo_run(tmp_path / "run")
    status = json.loads((run / "status.json").read_text())
    status.update(started=started)
    if ended is None:
        status.update(status="running")
        status.pop("ended", None)
    else:
        status.update(ended=ended, duration_s=ended - started)
    (run / "status.json").write_text(json.dumps(status))
    if first_record is None:
        (run / "metrics.jsonl").write_text("")
    else:
        lines = (run / "metrics.jsonl").read_text().splitlines()
        recs = [json.loads(ln) for ln in lines]
        t0 = recs[0]["time"]
        for r in recs:
            r["time"] += first_record - t0
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_open_opens_on_the_run_and_its_clock_is_status_json_duration(tmp_path):
    """--open RUN_DIR shows the run (not the Hardware tab); a finished run's elapsed time is status.json's
    duration_s (the launch to the end, not from the first rank's record)."""
    run = _run_dir(tmp_path, started=1_700_000_000.0, ended=1_700_000_030.0, first_record=1_700_000_012.0)

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False, open_run=str(run))
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            assert app.query_one("#tabs").active == "monitor"
            assert app.focused is not None and app.monitor in app.focused.ancestors
            await until(pilot, lambda: app.run_summary is not None)
            assert app.run_summary.elapsed_s == pytest.approx(30.0)
            head = str(app.query_one("#run-status").render())
            assert f"{fmt_seconds(30.0)}" in head, head

    asyncio.run(flow())


def test_the_elapsed_clock_never_goes_back_when_the_first_record_arrives(tmp_path):
    """A running run, launched 20 s ago, its ranks' first record 5 s ago: the clock keeps counting from the
    launch (it jumped back to 5 s)."""
    now = time.time()
    run = _run_dir(tmp_path, started=now - 20, ended=None, first_record=None)
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False, open_run=str(run))
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await until(pilot, lambda: app.run_summary is not None)
            before = app.run_summary.elapsed_s
            assert before >= 20
            full = _run_dir(tmp_path / "full", started=now - 20, ended=None, first_record=now - 5)
            (run / "metrics.jsonl").write_text((full / "metrics.jsonl").read_text())
            app.refresh_monitor()
            await pilot.pause(0.2)
            assert app.run_summary.step > 0
            assert app.run_summary.elapsed_s >= before

    assert metrics == ""
    asyncio.run(flow())


def test_empty_workload_boxes_are_valid_and_a_fast_tab_moves_on_at_once(tmp_path):
    """An empty seq or batch box means "the default": a Tab through it leaves it not red. Keys typed right
    after a Tab (faster than the app handles one key) go into the next box, not the one left."""

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("2")
            seq, batch = app.query_one("#seq-len"), app.query_one("#global-batch")
            seq.focus()
            await pilot.press("tab", "tab")
            await pilot.pause(0.2)
            assert not seq.has_class("-invalid") and not batch.has_class("-invalid")
            seq.focus()
            await pilot.pause(0.1)
            for ch in "256\t32":  # one burst, as a terminal delivers a fast typist's keys
                app.post_message(events.Key("tab" if ch == "\t" else ch, ch))
            await until(pilot, lambda: batch.value == "32", timeout=10)
            assert (seq.value, batch.value) == ("256", "32")

    asyncio.run(flow())


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_hardware_boxes_are_whole(tmp_path, size):
    """The Hardware tab's cluster path shows the whole example path and the ssh host box has room for a
    user@host, every box and button inside the screen, at 80 and at 120 columns."""

    async def flow():
        app = ParadvisorApp(cluster=C000_SHOWN, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            path_box, host_box = app.query_one("#cluster-path"), app.query_one("#ssh-host")
            assert path_box.value == C000_SHOWN
            assert path_box.content_region.width > len(C000_SHOWN), path_box.content_region
            assert host_box.content_region.width >= 24, host_box.content_region
            for wid in ("#cluster-path", "#load-cluster", "#ssh-host", "#add-host", "#use-local"):
                r = app.query_one(wid).region
                assert r.width > 0 and r.right <= size[0], (wid, r)

    asyncio.run(flow())


def test_a_sequence_beyond_the_trained_context_is_warned_and_no_fix_goes_beyond_it(tmp_path):
    """The CLI's "beyond the model's trained context" warning is on the Plans tab too, and the shorter
    sequence the not-fitting advice suggests is within the context."""

    async def flow():
        app = ParadvisorApp(cluster=C000, model="llama-150m", runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("2")
            app.query_one("#seq-len").value = "65536"
            await until(pilot, lambda: app.rec is not None and app.rec.workload.seq_len == 65536, timeout=60)
            await settle(app, pilot)
            work = str(app.query_one("#workload").render())
            assert "beyond llama-150m's trained context (1024)" in work, work
            fixes = [f for f in app.rec.nearest_fix.fixes if f.change == "shorter sequence"]
            assert fixes and all(f.seq_len <= 1024 for f in fixes), fixes
            shown = str(app.query_one("#plan-reason").render())
            assert "--seq-len 32768" not in shown and "--seq-len 1024" in shown, shown

    asyncio.run(flow())


@pytest.mark.slow
def test_a_run_that_fails_at_once_is_not_called_launched(tmp_path, monkeypatch):
    """A run whose rank fails before its first step: the Launch tab's line says it failed (it said
    "launched" for good)."""
    monkeypatch.setenv("PARADVISOR_FAULT", "rank=0,step=1,kind=exit")
    presets = tmp_path / "presets"
    presets.mkdir()
    # one rank: what the line says depends on the run's status, not on its size
    variant(presets, "tiny-cpu-smoke", **ONE_RANK)

    async def flow():
        app = ParadvisorApp(
            cluster=C000,
            runs_dir=str(tmp_path / "runs"),
            presets_dir=str(presets),
            live=False,
            confirm=False,
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await pilot.press("3")
            app.query_one("#preset-select").value = str(presets / "tiny-cpu-smoke.toml")
            await pilot.press("L")
            s = await wait_status(app, pilot, {"failed", "finished", "cancelled"})
            assert s.status == "failed"
            msg = app.query_one("#launch-msg")
            await until(pilot, lambda: "failed" in str(msg.render()))
            line = str(msg.render())
            assert "launched" not in line and "tiny-cpu-smoke failed" in line, line

    asyncio.run(flow())


@pytest.mark.slow  # a real run
def test_u_resumes_the_failed_run_on_the_monitor_tab_from_its_checkpoint(tmp_path):
    """A run that failed after its step-2 checkpoint, opened on the Monitor tab: `u` starts its continuation
    from that checkpoint in a new run directory, whose status names the parent and the step (as
    `paradvisor launch --resume` does)."""
    from tests.support.runs import launch

    # one rank: the TUI's resume is under test (a failed rank among several: tests/run/test_resume.py)
    train = {"steps": 4, "checkpoint_every": 2, "checkpoint_async": False}
    p = variant(tmp_path, "resumable", train=train, **ONE_RANK)
    proc, parent = launch(p, tmp_path / "runs", env={"PARADVISOR_FAULT": "rank=0,step=3,kind=exit"})
    assert proc.returncode == 1, proc.stderr[-2000:]

    async def flow():
        app = ParadvisorApp(
            cluster=C000, runs_dir=str(tmp_path / "runs"), live=False, confirm=False, open_run=str(parent)
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            await until(pilot, lambda: app.run_dir == parent and app.tabs.active == "monitor")
            await pilot.press("u")
            await until(pilot, lambda: app.run_dir not in (None, parent), timeout=90)
            child = app.run_dir
            assert child != parent, [n.message for n in app._notifications]
            await until(
                pilot, lambda: json.loads((child / "status.json").read_text())["status"] != "running", 180
            )
            doc = json.loads((child / "status.json").read_text())
            assert doc["status"] == "finished", (doc.get("reason"), doc.get("exit_code"))
            assert doc["parent"] == str(parent.resolve()) and doc["resume_step"] == 2, doc

    asyncio.run(flow())


def test_no_ranked_plan_says_whether_nothing_fits_or_nothing_can_be_launched():
    """fp8: every plan fits but is plan only, and there is no nearest fix (nothing is too big); the pane said
    "nothing fits" over an empty line. Nothing fitting still names the closest plan and its fixes."""
    from paradvisor.hardware.cluster import single_node_cluster
    from paradvisor.model import load_profile
    from paradvisor.plan.search import recommend
    from paradvisor.spec.plan import Workload
    from paradvisor.tui.screens import nothing_ranked_text

    h100 = single_node_cluster("H100 SXM", 8)
    fp8 = recommend(load_profile("llama-2-7b"), h100, Workload("llama-2-7b", precision="fp8"))
    assert not fp8.plans and fp8.plan_only and "no launchable plan" in nothing_ranked_text(fp8)
    big = recommend(load_profile("llama-2-70b"), single_node_cluster("T4", 1), Workload("llama-2-70b"))
    assert nothing_ranked_text(big).startswith("[b red]nothing fits") and "fix:" in nothing_ranked_text(big)


def test_the_run_view_says_what_a_running_run_does_while_no_step_comes(tmp_path):
    """The run's head line names the phase in effect (rundir/phases.py: a save, an eval, the export) with its
    time so far and its expected time, as `launch` and `monitor` do, until the announcing rank writes again."""
    import os

    import psutil

    now = time.time()
    run = _run_dir(tmp_path, started=now - 20, ended=None, first_record=now - 10)
    status = json.loads((run / "status.json").read_text())
    me = {"launcher_pid": os.getpid(), "launcher_started": psutil.Process().create_time()}
    (run / "status.json").write_text(json.dumps(status | me))  # its launcher: this process, alive
    with open(run / "metrics.jsonl", "a") as f:
        f.write(
            json.dumps({"kind": "phase", "rank": 0, "time": now - 3, "phase": "export", "expect_s": 95})
            + "\n"
        )

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False, open_run=str(run))
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(app, pilot)
            await until(pilot, lambda: app.run_summary is not None)
            head = str(app.query_one("#run-status").render())
            assert re.search(r"\(exporting the model: [3-9] s so far, ~1.6 min expected\)", head), head
            with open(run / "metrics.jsonl", "a") as f:
                f.write(
                    json.dumps({"kind": "export", "rank": 0, "time": now, "path": "m", "bytes": 1}) + "\n"
                )
            app.refresh_monitor()
            await pilot.pause(0.2)
            assert "exporting" not in str(app.query_one("#run-status").render())

    asyncio.run(flow())
