"""The long-run tools on a run that has gone on for days: `monitor --once`, `runs` and `validate` on a run whose
metrics.jsonl is 200 MB, and `runs` over 10,000 run directories (issue 32, goal 3: each under 2 s and 150 MB).

Run: python benchmarks/long_run.py RUN_DIR [--mb 200] [--runs 10000] [--repeat 3]

RUN_DIR is a finished real run (e.g. `paradvisor launch --preset presets/tiny-cpu-smoke.toml`); its
metrics.jsonl is repeated, step numbers and times carried on, until it holds --mb MB. Each command is a cold
process; the table gives median wall time, median CPU time (user + sys: what a loaded machine cannot
inflate) and the largest peak RSS, for three states of the run directory, side by side:
  no index    metrics.index.json (and summary.json) absent: the log is read from the start (both written)
  index       the index written by the previous reader (or by the run's own follower): only the tail is read
              (`runs`: the ended run's summary.json is read instead of its files)
  stale index the log was appended to after the index: the index still holds, the new tail is read
and `runs` over --runs copies of the run, first with no summary.json (each run's entry made from its files and
kept), then from the kept summaries (monitor/runcache.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _timing import paradvisor_argv


def once(argv: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one cold process (its own rusage, through wait4)."""
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, {**os.environ, **(env or {})}, file_actions=_quiet())
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({status})")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def _quiet():
    return [
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]


def grow(src: Path, dst: Path, mb: int) -> int:
    """dst: a copy of the run `src` whose metrics.jsonl is repeated up to `mb` MB; the number of lines."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("torchelastic", "metrics.index.json"))
    lines = [json.loads(x) for x in (src / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in lines if r.get("kind") == "step"]
    head = [r for r in lines if r.get("kind") != "step"]
    last = max(r["step"] for r in steps)
    span = max(r["time"] for r in steps) - min(r["time"] for r in steps) + 1
    n = 0
    with open(dst / "metrics.jsonl", "w") as f:
        for r in head:
            f.write(json.dumps(r) + "\n")
        rep = 0
        while f.tell() < mb << 20:
            for r in steps:
                f.write(
                    json.dumps({**r, "step": r["step"] + rep * last, "time": r["time"] + rep * span}) + "\n"
                )
                n += 1
            rep += 1
    return n


def table(label: str, argv: list[str], repeat: int, before=None, env: dict | None = None) -> None:
    runs = []
    for _ in range(repeat):
        if before:
            before()
        runs.append(once(argv, env))
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    rss = max(r[2] for r in runs)
    print(f"{label:44s} {wall:7.2f} s {cpu:7.2f} s {rss:7.0f} MB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = paradvisor_argv()
    if not os.path.isabs(base[0]):
        base[0] = shutil.which(base[0]) or base[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        run = root / "long-run"
        n = grow(args.run_dir, run, args.mb)
        size = (run / "metrics.jsonl").stat().st_size
        print(
            f"metrics.jsonl: {size / 2**20:.0f} MB, {n:,} step records; cold processes, median of {args.repeat}"
        )
        print(f"{'command (index state)':44s} {'wall':>9s} {'CPU':>9s} {'peak RSS':>10s}")
        index = run / "metrics.index.json"

        def drop():
            index.unlink(missing_ok=True)
            (run / "summary.json").unlink(missing_ok=True)  # runs: the entry kept beside the files

        cmds = [
            ("monitor --once", [*base, "monitor", "--once", "--json", str(run)]),
            ("runs", [*base, "runs", "--runs-dir", str(root), "--json"]),
            ("validate", [*base, "validate", "--json", str(run)]),
        ]
        for name, argv in cmds:
            table(f"{name} (no index)", argv, args.repeat, before=drop)
            once(argv)  # writes the index
            table(f"{name} (index)", argv, args.repeat)
        with open(run / "metrics.jsonl", "a") as f:  # the run goes on after the index was written
            lines = (args.run_dir / "metrics.jsonl").read_text().splitlines()
            f.write("\n".join(x for x in lines if '"step"' in x) + "\n")
        table("monitor --once (stale index, log grew)", cmds[0][1], args.repeat)
        many = Path(tmp) / "many"
        many.mkdir()
        for i in range(args.runs):
            d = many / f"run-{i:05d}"
            d.mkdir()
            for name in ("plan.toml", "status.json", "metrics.jsonl", "prediction.json"):
                if (args.run_dir / name).exists():
                    os.link(args.run_dir / name, d / name)
        listing = [*base, "runs", "--runs-dir", str(many), "--json"]
        wall, cpu, rss = once(listing)  # makes each run's summary.json
        print(
            f"{f'runs over {args.runs:,} run directories (no summary)':44s} {wall:7.2f} s {cpu:7.2f} s {rss:7.0f} MB"
        )
        table(f"runs over {args.runs:,} run directories (summary)", listing, args.repeat)
        table("the same, human listing, 80 columns", listing[:-1], args.repeat, env={"COLUMNS": "80"})
        table("the same, human listing, 200 columns", listing[:-1], args.repeat, env={"COLUMNS": "200"})


if __name__ == "__main__":
    main()
