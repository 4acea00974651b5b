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


def cold_runs_usage(argv: list[str], repeat: int = 5) -> dict:
    """Median wall seconds, median CPU seconds (user + sys of the child) and the largest peak RSS (MB)
    of `repeat` fresh processes. CPU time is what a loaded machine cannot inflate; wall time is what
    a user waits for on an idle one."""
    import resource

    walls, cpus, rss = [], [], 0
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        rss = max(rss, after.ru_maxrss / 1024)  # KiB on Linux; RUSAGE_CHILDREN keeps the largest child
    return {"wall": statistics.median(walls), "cpu": statistics.median(cpus), "rss_mb": rss}
