"""Deterministic scenes of the TUI, for the SVG snapshot tests (tests/tui/test_tui_snapshots.py) and
`scripts/screenshots.py`.

Each scene builds the app on fixed inputs (a cluster file, a model, a finished run written here with
fixed numbers) with live sampling off, so the same code renders the same screen everywhere. This module
imports no test fixtures (tests/conftest.py sets the environment of a test session; the screenshots
script must not get it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from paradvisor.shipped import presets_dir
from paradvisor.tui.app import ParadvisorApp

# Relative paths (the current directory first, then the checkout: tui/paths.py) so that screens do not
# show where the checkout lives.
CLUSTER = "examples/clusters/paper000-two-servers.toml"
GEO = "examples/clusters/paper003-geo-four-nodes.toml"
SIZE = (120, 40)


def write_demo_run(run_dir: Path) -> Path:
    """A finished 2-rank DiLoCo run with fixed metrics (no process is started)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    preset = (presets_dir() / "llama150m-diloco-local-steps.toml").read_text()
    preset += (
        "\n[prediction]\nmemory_per_gpu_bytes = 2400000\nstep_time_s = 0.012\nsamples_per_s = 650.0\n"
        if "[prediction]" not in preset
        else ""
    )
    (run_dir / "plan.toml").write_text(preset)
    (run_dir / "prediction.json").write_text(
        json.dumps(
            {  # what a launch writes (monitor/predict.py)
                "schema": "paradvisor.prediction/1",
                "source": "preset",
                "runs_on": "cpu",
                "note": "the preset's prediction, for the GPUs it was planned on",
                "memory_per_gpu_bytes": 2400000,
                "step_time_s": 0.012,
                "samples_per_s": 650.0,
                "model_state_bytes": 2400000,
            }
        )
    )
    t0 = 1_700_000_000.0
    lines = [{"rank": r, "time": t0, "kind": "start", "world_size": 2} for r in (0, 1)]
    for step in range(1, 19):
        for r, h in ((0, 4), (1, 6)):
            if step > 3 * h:
                continue
            loss = 8.3 * math.exp(-step / 14) + 2.0 + 0.05 * math.sin(step)
            lines.append(
                {
                    "rank": r,
                    "time": t0 + step * 0.1,
                    "kind": "step",
                    "step": step,
                    "loss": loss,
                    "lr": 3e-3,
                    "step_time_s": 0.011 + 0.001 * (step % 3),
                    "samples": 4,
                    "samples_per_s": 350.0 + step,
                    "tokens_per_s": 22400.0,
                    "sync_wait_s": 0.0,
                    "world_size": 2,
                    "strategy": "diloco",
                    "mem_params_bytes": 600000,
                    "mem_grads_bytes": 600000,
                    "mem_optimizer_bytes": 1200000,
                    "mem_model_state_bytes": 2400000,
                    "node": r,
                    "node_name": ("slow", "fast")[r],
                }
            )
    for rnd in (1, 2, 3):
        for r, wait in ((0, 0.024 * rnd), (1, 0.001)):
            lines.append(
                {
                    "rank": r,
                    "time": t0 + rnd,
                    "kind": "outer",
                    "round": rnd,
                    "step": rnd * 4,
                    "sync_wait_s": wait,
                    "outer_comm_s": 0.004,
                    "local_steps": 4 if r == 0 else 6,
                    "world_size": 2,
                    "strategy": "diloco",
                    "node": r,
                    "node_name": ("slow", "fast")[r],
                }
            )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run_dir / "status.json").write_text(
        json.dumps(
            {
                "schema": "paradvisor.status/1",
                "status": "finished",
                "run_dir": str(run_dir),
                "name": "llama150m-diloco-local-steps",
                "pid": 0,
                "started": t0 - 2,
                "ended": t0 + 4.5,
                "world_size": 2,
                "label": "DiLoCo(H=4) x DDPx2",
                "returncode": 0,
            }
        )
    )
    (run_dir / "rank-0.stderr.log").write_text("")
    return run_dir


def scene_app(scene: str, tmp: Path) -> tuple[ParadvisorApp, list[str]]:
    """(app, keys to press) for a named scene."""
    if scene == "hardware":
        return ParadvisorApp(cluster=CLUSTER, runs_dir="runs", live=False), []
    if scene == "plans":
        return ParadvisorApp(cluster=CLUSTER, runs_dir="runs", live=False), ["2"]
    if scene == "plans-geo":
        return ParadvisorApp(cluster=GEO, model="llama-150m", runs_dir="runs", live=False), ["2"]
    if scene == "plan-detail":
        return ParadvisorApp(cluster=CLUSTER, runs_dir="runs", live=False), ["2", "enter"]
    if scene == "launch":
        return ParadvisorApp(cluster=CLUSTER, runs_dir="runs", live=False), ["3"]
    if scene in ("monitor", "monitor-ranks", "monitor-log"):
        run = write_demo_run(tmp / "demo-run")
        views = {"monitor": [], "monitor-ranks": ["v"], "monitor-log": ["v", "v"]}[scene]
        return (
            ParadvisorApp(cluster=GEO, model="llama-150m", runs_dir="runs", live=False, open_run=str(run)),
            ["4", *views],
        )
    if scene == "help":
        return ParadvisorApp(cluster=CLUSTER, runs_dir="runs", live=False), ["question_mark"]
    if scene == "not-fitting":
        return ParadvisorApp(cluster=CLUSTER, model="llama-2-7b", runs_dir="runs", live=False), ["2", "i"]
    if scene == "confirm":
        # the smoke preset with its checkpoint interval set: the default one comes from a write-speed probe,
        # which differs from run to run (the confirmation names the MiB/s it measured)
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="paradvisor-scene-"))
        smoke = (Path(presets_dir()) / "tiny-cpu-smoke.toml").read_text()
        (folder / "tiny-cpu-smoke.toml").write_text(
            smoke.replace("steps = 10\n", "steps = 10\ncheckpoint_every = 5\n")
        )
        app = ParadvisorApp(cluster=CLUSTER, runs_dir="runs", presets_dir=str(folder), live=False)
        return app, ["3", "L"]
    raise ValueError(scene)


SCENES = (
    "hardware",
    "plans",
    "plans-geo",
    "plan-detail",
    "not-fitting",
    "launch",
    "confirm",
    "monitor",
    "monitor-ranks",
    "monitor-log",
    "help",
)
SIZES = ((80, 24), (120, 40))  # the smallest terminal the TUI is made for, and a common one
# The tabs themselves at both sizes; the screens over them (a plan's detail, the confirmation, help, the other
# plans and monitor views) at the smallest, where they are cramped (issue 34: one snapshot per layout question)
BOTH_SIZES = ("hardware", "plans", "launch", "monitor")
SNAPSHOTS = [(scene, size) for scene in SCENES for size in (SIZES if scene in BOTH_SIZES else SIZES[:1])]


async def settle(app, pilot) -> None:
    await pilot.pause(0.3)
    await app.workers.wait_for_complete()
    await pilot.pause(0.3)
    while any(w.is_running for w in app.workers):  # a worker's result started another (cluster file, ranking)
        await app.workers.wait_for_complete()
        await pilot.pause(0.1)
    app.refresh_monitor()
    await pilot.pause(0.2)
