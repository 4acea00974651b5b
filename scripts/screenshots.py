"""Regenerate screenshots/*.svg, the README's pictures, at 120x40.

The planning screens come from the deterministic scenes in tests/support/tui_scenes.py (the shipped example
clusters). The monitor pictures come from real runs: the shipped presets tiny-cpu-smoke and
llama150m-diloco-local-steps are launched here (`paradvisor launch --quiet`, CPU processes, about a
minute), and each finished run directory is opened in the TUI. With --calibrate, `paradvisor calibrate
--quick` runs first, so that the prediction beside the measurement includes times for this CPU.

Run: python scripts/screenshots.py [--calibrate]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the scenes live in tests/ (no fixtures imported: tests/support/tui_scenes.py)

from paradvisor.tui.app import ParadvisorApp  # noqa: E402
from tests.support.tui_scenes import SCENES, SIZE, scene_app, settle  # noqa: E402

OUT = REPO / "screenshots"
RUNS = {"llama150m-diloco-local-steps": "monitor", "tiny-cpu-smoke": "monitor-tiny-cpu-smoke"}
PLANNING = [s for s in SCENES if not s.startswith("monitor")]  # the monitor's pictures are real runs


async def shoot(app: ParadvisorApp, keys: list[str], name: str) -> Path:
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        for k in keys:
            await pilot.press(k)
            await settle(app, pilot)
        app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
    return OUT / f"{name}.svg"


def real_run(preset: str, runs: Path, env: dict) -> Path:
    """Launch a shipped preset for real; the run directory it wrote."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "paradvisor",
            "launch",
            "--preset",
            preset,
            "--runs-dir",
            str(runs),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=900,
    )
    if proc.returncode != 0:
        sys.exit(f"screenshots: {preset} did not finish: {proc.stderr.strip()}")
    return Path(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--calibrate", action="store_true", help="calibrate this CPU first (times in the prediction)"
    )
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for scene in PLANNING:
            app, keys = scene_app(scene, tmp)
            print(asyncio.run(shoot(app, keys, scene)))
        if args.calibrate:
            cal = tmp / "calibration.json"
            subprocess.run(
                [sys.executable, "-m", "paradvisor", "calibrate", "--quick", "--out", str(cal)],
                check=True,
                env=env,
                cwd=REPO,
                capture_output=True,
            )
            env["PARADVISOR_CALIBRATION"] = os.environ["PARADVISOR_CALIBRATION"] = str(cal)
        for preset, name in RUNS.items():
            run = real_run(preset, tmp / "runs", env)
            for suffix, keys in (("", ["4"]), ("-ranks", ["4", "v"])):
                app = ParadvisorApp(
                    cluster="examples/clusters/paper003-geo-four-nodes.toml",
                    model="llama-150m",
                    runs_dir=str(tmp / "runs"),
                    live=False,
                    open_run=str(run),
                )
                print(asyncio.run(shoot(app, keys, name + suffix)))


if __name__ == "__main__":
    main()
