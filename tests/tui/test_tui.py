"""The interactive session through Textual's Pilot: the whole flow, as a person would use it."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from paradvisor.tui.app import ParadvisorApp
from tests.conftest import EXAMPLES
from tests.support.runs import ONE_RANK, variant

C000 = str(EXAMPLES / "paper000-two-servers.toml")


async def settle(app, pilot, seconds: float = 0.3):
    """Until no worker runs: one worker's result can start the next (the cluster file read, then a ranking)."""
    await pilot.pause(seconds)
    await app.workers.wait_for_complete()
    await pilot.pause(0.1)
    while any(w.is_running for w in app.workers):
        await app.workers.wait_for_complete()
        await pilot.pause(0.1)


async def wait_status(app, pilot, want: set[str], timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.5)
        s = app.run_summary
        if s and s.status in want:
            return s
    raise AssertionError(f"run did not reach {want}: {app.run_summary}")


async def until(pilot, cond, timeout: float = 20) -> None:
    """Wait (bounded) for a condition instead of a fixed pause: CI's 2 cores can be slow."""
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        await pilot.pause(0.1)


@pytest.mark.slow  # a real run
def test_whole_flow(tmp_path):
    """Load 000's cluster, pick bert-base-uncased, see plans ranked, open an explanation, launch the tiny
    CPU preset and watch it finish, then stop a second run and see it cancelled."""
    presets = tmp_path / "presets"
    presets.mkdir()
    # one rank: the flow, not the ranks, is what this test is about (rank rows: test_rank_rows_...)
    variant(presets, "tiny-cpu-smoke", **ONE_RANK)
    variant(presets, "long-run", train={"steps": 100000}, **ONE_RANK)

    async def flow():
        app = ParadvisorApp(
            runs_dir=str(tmp_path / "runs"), presets_dir=str(presets), model="gpt2", live=False
        )
        async with app.run_test(size=(130, 42)) as pilot:
            await settle(app, pilot)
            # Hardware: this machine first, then the cluster file of paper 000
            app.query_one("#cluster-path").focus()
            await pilot.press(*C000)
            await pilot.click("#load-cluster")
            await settle(app, pilot)
            assert app.cluster.name == "paper000-two-servers" and app.cluster.gpu_count == 6
            hw = app.query_one("#hw-table")
            assert hw.row_count == 6
            # Workload: pick bert-base-uncased; plans re-rank
            await pilot.press("2")
            app.query_one("#model").value = "bert-base-uncased"
            await settle(app, pilot)
            assert app.rec.profile.name == "bert-base-uncased"
            table = app.query_one("#plans-table")
            assert table.row_count >= 5
            times = [e.step_time for e in app.rec.plans]
            assert app.selected is app.rec.plans[0]
            assert "2.7/24" in str(table.get_row_at(0)[4]) or "/24" in str(table.get_row_at(0)[4])
            # Changing the sequence length re-ranks at once
            app.query_one("#seq-len").focus()
            await pilot.press("2", "5", "6")
            await settle(app, pilot)
            assert app.rec.workload.seq_len == 256
            assert [e.step_time for e in app.rec.plans] != times
            # A plan's explanation
            table.focus()
            await pilot.press("down", "enter")
            from paradvisor.tui.screens import PlanDetailScreen

            await until(pilot, lambda: isinstance(app.screen, PlanDetailScreen))

            assert isinstance(app.screen, PlanDetailScreen)
            assert "Memory per GPU" in app.screen.markdown and "Time per step" in app.screen.markdown
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, PlanDetailScreen))
            # Launch the tiny CPU preset and watch the monitor reach `finished`
            await pilot.press("3")
            app.query_one("#preset-select").value = str(presets / "tiny-cpu-smoke.toml")
            await pilot.pause(0.2)
            app.query_one("#launch-preset").press()
            # A confirmation first: the command and the predicted memory and time; nothing runs before "yes".
            from paradvisor.tui.screens import ConfirmLaunchScreen

            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            assert "torch.distributed.run" in app.screen.text  # at once; its prediction fills in (a worker)
            await until(pilot, lambda: "predicted memory:" in app.screen.text)
            question = app.screen.text
            assert "checkpoints: " in question  # the interval decided as `paradvisor launch` decides it
            assert "model states 1.78 MiB + activations" in question and "predicted time:" in question
            assert app.run_dir is None
            await pilot.press("enter")
            await until(pilot, lambda: app.run_dir is not None)
            assert app.run_dir is not None, str(app.query_one("#launch-msg").render())
            s = await wait_status(app, pilot, {"finished", "failed"})
            assert s.status == "finished", s
            assert app.query_one("#tabs").active == "monitor"
            assert s.step == 10 and s.loss is not None
            assert json.loads((app.run_dir / "status.json").read_text())["status"] == "finished"
            first = app.run_dir
            # A second, long run: stop it and see `cancelled`
            app.query_one("#preset-select").value = str(presets / "long-run.toml")
            app.action_launch_preset()
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            await pilot.press("y")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (
                app.run_summary
                and app.run_summary.run_dir == str(app.run_dir)  # the second run's summary, not the first's
                and app.run_summary.step >= 2
                and app.run_dir != first
            ):
                await pilot.pause(0.3)
            await pilot.press("s")
            s = await wait_status(app, pilot, {"cancelled", "failed", "finished"})
            assert s.status == "cancelled"
            # help screen and theme toggle
            await pilot.press("question_mark")
            from paradvisor.tui.screens import HelpScreen

            await until(pilot, lambda: isinstance(app.screen, HelpScreen))

            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            before = app.theme
            await pilot.press("t")
            assert app.theme != before

    asyncio.run(flow())


def test_no_gpu_machine_says_so(tmp_path):
    async def flow():
        app = ParadvisorApp(runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot, 0.5)
            if app.cluster.gpu_count:
                pytest.skip("this machine has a GPU")
            summary = str(app.query_one("#hw-summary").render())
            assert "No GPU to plan for here" in summary
            assert "no NVIDIA GPU found" in summary
            assert "load a cluster file" in str(app.query_one("#plan-reason").render())

    asyncio.run(flow())


def test_bad_cluster_file_is_a_notification_not_a_crash(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[node]]\nname = 'a'\ngpus = [{ type = 'RTX 9999', count = 1 }]\n")

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            app.load_cluster(str(bad))
            await until(pilot, lambda: any("unknown GPU type" in n.message for n in app._notifications))
            assert app.cluster.name == "paper000-two-servers"  # unchanged
            assert any("unknown GPU type" in n.message for n in app._notifications)

    asyncio.run(flow())


def test_sampler_feeds_the_live_view(tmp_path):
    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=True, sample_interval=0.1)
        async with app.run_test(size=(120, 40)) as pilot:
            # Sampling runs on a thread; on a loaded 2-core CI box the first samples can lag, so
            # wait (bounded) for three instead of assuming they arrive within a fixed second.
            await until(pilot, lambda: len(app.samples) >= 3)
            assert len(app.samples) >= 3
            assert "CPU" in str(app.query_one("#hw-live").render())

    asyncio.run(flow())


def test_a_reading_that_arrives_while_the_session_closes_is_dropped(tmp_path):
    """Textual closes the screens before the App's unmount stops the sampler: a reading delivered in between
    stops the sampler and touches no widget (updating one then scheduled a refresh that found no screen)."""
    seen = {}

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=True, sample_interval=0.1)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(app.samples) >= 1)
            close_all = app._close_all

            async def closing():  # the moment between the start of shutdown and the screens' removal
                before = len(app.samples)
                app.on_sample(app.samples[-1])
                seen.update(running=app.is_running, added=len(app.samples) - before)
                seen["stopped"] = app.sampler._stop_event.is_set()
                await close_all()

            app._close_all = closing

    asyncio.run(flow())
    assert seen == {"running": False, "added": 0, "stopped": True}


@pytest.mark.slow  # a real run
def test_launch_tab_shows_per_node_commands_and_a_ranked_plan_runs(tmp_path):
    """On 000's 2 + 4 GPUs the Launch tab shows one torchrun per node with that node's process count; the
    TUI ranks what `recommend` ranks (one advice path); and a ranked plan launched from the TUI runs here
    (on CPU processes) to `finished`."""
    from paradvisor.hardware.cluster import load_cluster
    from paradvisor.plan.advice import Request, advise

    two = tmp_path / "two.toml"
    two.write_text('name = "two-t4"\n[[node]]\nname = "box"\ngpus = [{ type = "T4", count = 2 }]\n')

    async def flow():
        app = ParadvisorApp(
            runs_dir=str(tmp_path / "runs"), presets_dir=str(tmp_path), model="bert-base-uncased", live=False
        )
        async with app.run_test(size=(130, 42)) as pilot:
            await settle(app, pilot)
            app.query_one("#cluster-path").focus()
            await pilot.press(*C000)
            await pilot.click("#load-cluster")
            await settle(app, pilot)
            await until(pilot, lambda: app.rec is not None and app.rec.profile.name == "bert-base-uncased")
            cli_rec = advise(Request(model="bert-base-uncased", cluster=load_cluster(C000), top=20))
            assert [e.plan for e in app.rec.plans] == [e.plan for e in cli_rec.plans]
            await pilot.press("3")
            await until(pilot, lambda: "server-2" in str(app.query_one("#launch-command").render()))
            text = str(app.query_one("#launch-command").render())
            first, second = [ln for ln in text.splitlines() if "torch.distributed.run" in ln][:2]
            assert "server-1" in first and "--nproc-per-node 2" in first and "--node-rank 0" in first
            assert "server-2" in second and "--nproc-per-node 4" in second and "--node-rank 1" in second
            assert "2 + 4 processes on 2 nodes" in str(app.query_one("#launch-plan").render())
            # A two-GPU box: rank gpt-mini, launch the top plan; here its ranks run on CPU.
            app.query_one("#cluster-path").value = str(two)
            await pilot.press("1")
            await pilot.click("#load-cluster")
            await settle(app, pilot)
            await pilot.press("2")
            app.query_one("#model").value = "gpt-mini"
            app.query_one("#seq-len").value = "32"
            app.query_one("#global-batch").value = "8"
            await settle(app, pilot)
            await until(
                pilot,
                lambda: (
                    app.rec is not None
                    and app.rec.profile.name == "gpt-mini"
                    and app.rec.workload.seq_len == 32
                    and app.rec.workload.global_batch == 8
                ),
            )
            plan = app.selected.plan
            assert plan.world_size == 2
            app.action_launch_plan()
            from paradvisor.tui.screens import ConfirmLaunchScreen

            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            await pilot.press("escape")  # no: nothing starts
            await until(pilot, lambda: not isinstance(app.screen, ConfirmLaunchScreen))
            assert app.run_dir is None
            app.action_launch_plan()
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            await pilot.press("y")
            await until(pilot, lambda: app.run_dir is not None)
            s = await wait_status(app, pilot, {"finished", "failed"})
            assert s.status == "finished", s
            assert app.launch.preset.plan == plan

    asyncio.run(flow())


def _footer_keys(app) -> list[str]:
    from textual.widgets._footer import FooterKey

    return [k.key_display or k.key for k in app.screen.query(FooterKey)]


def test_small_terminal_shows_the_workload_the_columns_and_the_keys(tmp_path):
    """At 80x24: the workload in force as values with their sources, step time and throughput in the
    table, a marker on plans a rule moved, Help and Quit in the footer; digits go into a focused box,
    Esc leaves it, F-keys switch tabs from anywhere; i opens the not-fitting list with an Esc hint."""
    from paradvisor.tui.screens import PlanDetailScreen

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            await pilot.press("2")  # nothing typable has focus at start: the digit switches tabs
            await until(pilot, lambda: app.rec is not None)
            assert app.query_one("#tabs").active == "plans"
            table = app.query_one("#plans-table")
            labels = [str(c.label) for c in table.columns.values()]
            assert labels == ["#", "plan", "GiB/GPU", "step", "samples/s"]
            assert sum(c.get_render_width(table) for c in table.columns.values()) <= 80
            work = str(app.query_one("#workload").render())
            assert "seq 512 (model context)" in work and "batch 48 (8/GPU x 6 GPUs)" in work, work
            assert "fp16 (auto)" in work
            # a plan moved by a rule carries a marker, and its explanation says from where
            moved = app.moved_by_rules()
            assert moved, "000's bert plans have rules that reorder (split-by-speed)"
            marks = {str(table.get_row_at(i)[1]): str(table.get_row_at(i)[0]) for i in range(table.row_count)}
            for label, (frm, _) in moved.items():
                if label in marks:
                    rank = int(marks[label].rstrip("▲▼"))
                    assert marks[label].endswith("▲" if frm > rank else "▼"), (label, frm, marks[label])
            keys = _footer_keys(app)
            assert "?" in keys and "q" in keys, keys
            # digits typed into a focused box stay there; Esc leaves the box; then digits switch tabs again
            app.query_one("#seq-len").focus()
            await pilot.press("2", "5", "6")
            await settle(app, pilot)
            assert app.query_one("#tabs").active == "plans" and app.query_one("#seq-len").value == "256"
            assert "esc" in _footer_keys(app)
            await until(pilot, lambda: app.rec.workload.seq_len == 256)
            assert "seq 256 (typed)" in str(app.query_one("#workload").render())
            await pilot.press("escape")
            assert app.focused is table
            await pilot.press("3")
            assert app.query_one("#tabs").active == "launch"
            app.query_one("#preset-name").focus()
            await pilot.press("f2")  # F-keys switch tabs even from inside a box
            assert app.query_one("#tabs").active == "plans"
            await pilot.press("i")
            await until(pilot, lambda: isinstance(app.screen, PlanDetailScreen))
            assert "Does not fit" in app.screen.markdown
            assert "esc" in _footer_keys(app) and any("PgDn" in k for k in _footer_keys(app))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, PlanDetailScreen))

    asyncio.run(flow())


def test_monitor_at_80x24_has_plots_rank_rows_and_a_full_height_log(tmp_path):
    from tests.support.tui_scenes import write_demo_run

    run = write_demo_run(tmp_path / "run")

    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False, open_run=str(run))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            await pilot.press("4")
            await until(pilot, lambda: app.run_summary is not None)
            app.refresh_monitor()
            await pilot.pause(0.2)
            s = app.run_summary
            # one measured step time: the median over steps of the slowest rank (warm-up steps 1-2 left out)
            assert s.step_points[0][0] == 1 and len(s.step_points) == 18
            assert s.samples_per_s == pytest.approx(8 / 0.012)
            compare = str(app.query_one("#run-compare").render())
            assert "step time" in compare and "pred. 12.0 ms" in compare and "samples/s" in compare
            plot = app.query_one("#tput-plot")
            drawn = str(plot.render())
            assert "samples/s" in drawn and "18" in drawn  # title and the last step on the x axis
            await pilot.press("v")
            rows = app.query_one("#rank-table")
            assert rows.row_count == 2
            assert [str(rows.get_row_at(i)[1]) for i in range(2)] == ["slow", "fast"]
            assert str(rows.get_row_at(0)[2]) == "12/12" and str(rows.get_row_at(0)[5]) == "0.14 s"
            await pilot.press("v")
            log = app.query_one("#run-log")
            assert (
                log.size.height >= 10 and log.line_count > log.size.height
            )  # it fills the view, and scrolls

    asyncio.run(flow())


@pytest.mark.slow  # a real run
def test_rank_rows_show_the_processes_readings_and_closing_the_session_stops_its_run(tmp_path):
    """A real run launched from the TUI: its ranks' rows carry CPU and resident memory read from their
    processes, and the prediction computed at launch is in the run dir. Then the session is closed with the run
    going: the run is stopped (cancelled or interrupted, with that reason), what it logged stays intact, and no
    process is left."""
    from tests.support.runs import assert_intact, snapshot, status_of, steps_of, wait_gone

    presets = tmp_path / "presets"
    presets.mkdir()
    variant(presets, "long", train={"steps": 100000})
    state = {}

    async def flow():
        app = ParadvisorApp(
            cluster=C000,
            runs_dir=str(tmp_path / "runs"),
            presets_dir=str(presets),
            live=True,
            sample_interval=0.3,
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(app, pilot)
            app.query_one("#preset-select").value = str(presets / "long.toml")
            app.action_launch_preset()
            from paradvisor.tui.screens import ConfirmLaunchScreen

            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            await pilot.press("y")  # the confirmation the TUI asks before any run starts
            await until(pilot, lambda: app.run_summary is not None and app.run_summary.step >= 3, timeout=120)
            assert app.run_summary is not None and app.run_summary.step >= 3, app.run_summary
            pane = app.query_one("#monitor-pane")
            await until(
                pilot,
                lambda: (
                    len(pane.readings) == 2
                    and all(r.get("cpu_pct") is not None for r in pane.readings.values())
                ),
                timeout=30,
            )
            table = app.query_one("#rank-table")
            assert table.row_count == 2
            for i in range(2):
                row = [str(c) for c in table.get_row_at(i)]
                assert row[6].endswith("%") and "MiB" in row[7], row
            pred = json.loads((app.run_dir / "prediction.json").read_text())
            assert pred["source"] == "launch" and pred["model_state_bytes"] > 0
            assert app.run_summary.eta_s is not None and app.run_summary.eta_s > 0
            assert len(steps_of(app.run_dir)) >= 3
            state["run_dir"] = app.run_dir
            state["before"] = snapshot(app.run_dir)
            assert app.launch.running()
        # the app has exited here, its run going

    asyncio.run(flow())
    run_dir = state["run_dir"]
    s = status_of(run_dir)
    assert s["status"] in ("cancelled", "interrupted") and s["reason"] == "the interactive session was closed"
    assert_intact(run_dir, state["before"])
    assert not wait_gone(run_dir)
