"""`paradvisor launch` against a hand-written torchrun of the same training entry (issue 32, goal 6).

Run: python benchmarks/launch_overhead.py [--preset presets/tiny-cpu-smoke.toml] [--repeat 3]

Each repeat runs, in turn, `paradvisor launch --preset P` and the torchrun command that launch wrote to the
run's command.json (the same entry, `python -m paradvisor.train --run-dir D`, in a fresh copy of the run
directory holding only plan.toml), so the machine's drift hits both alike. Printed per command: median end to
end wall time, median time from the command's start to the first rank's `start` record (the ranks' own
imports included, the same for both), and the ratios launch / torchrun side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _timing import paradvisor_argv

REPO = Path(__file__).resolve().parent.parent


def first_rank_start(run_dir: Path) -> float:
    times = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("kind") == "start" and isinstance(r.get("time"), (int, float)):
            times.append(r["time"])
    return min(times)


def timed(argv: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, float]:
    """(wall clock at the start, seconds end to end)."""
    t_wall = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-2000:]}")
    return t_wall, dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default=str(REPO / "presets" / "tiny-cpu-smoke.toml"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = paradvisor_argv()
    rows = {"launch": [], "torchrun": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        for i in range(args.repeat):
            before = set(runs.glob("*")) if runs.exists() else set()
            t_start, dt = timed([*base, "launch", "--preset", args.preset, "--runs-dir", str(runs)])
            (run,) = set(runs.glob("*")) - before
            rows["launch"].append((dt, first_rank_start(run) - t_start))
            cmd = json.loads((run / "command.json").read_text())
            hand = Path(tmp) / f"hand-{i}"
            hand.mkdir()
            shutil.copy(run / "plan.toml", hand / "plan.toml")
            argv = [a.replace(str(run), str(hand)).replace(run.name, hand.name) for a in cmd["argv"]]
            t_start, dt = timed(argv, cwd=cmd.get("cwd"))
            rows["torchrun"].append((dt, first_rank_start(hand) - t_start))
    med = {
        k: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v)) for k, v in rows.items()
    }
    print(
        f"{'tiny preset, cold processes, n=' + str(args.repeat):44s} {'end to end':>11s} {'first rank up':>14s}"
    )
    for k in ("launch", "torchrun"):
        label = "paradvisor launch --preset" if k == "launch" else "hand-written torchrun (same entry)"
        print(f"{label:44s} {med[k][0]:9.2f} s {med[k][1]:12.2f} s")
    print(
        f"{'ratio launch / torchrun':44s} {med['launch'][0] / med['torchrun'][0]:9.2f} x "
        f"{med['launch'][1] / med['torchrun'][1]:12.2f} x"
    )


if __name__ == "__main__":
    main()
