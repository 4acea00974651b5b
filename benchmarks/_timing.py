"""Helpers for benchmarks: median wall time of repeated cold process runs."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time


def paradvisor_argv() -> list[str]:
    exe = shutil.which("paradvisor")
    return [exe] if exe else [sys.executable, "-m", "paradvisor"]


def cold_runs(argv: list[str], repeat: int = 7) -> tuple[float, float, float]:
    """(median, min, max) seconds of `repeat` fresh processes running argv (output discarded)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return statistics.median(times), min(times), max(times)
