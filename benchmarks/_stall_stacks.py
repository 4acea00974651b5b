"""What the UI thread was doing in a stall: a thread that samples another thread's Python stack every millisecond,
and a report of the functions most often on it in a window (benchmarks/tui_stall.py --profile).

Sampling needs the GIL, which a busy UI thread hands over every `sys.getswitchinterval()` seconds: the script
lowers that to 1 ms while it samples, so a 50 ms stall gets dozens of samples.
"""

from __future__ import annotations

import collections
import sys
import threading
import time

FRAMES_SHOWN = 50


class StackSampler(threading.Thread):
    """Samples the stack of thread `ident` every `interval` seconds until stopped: (time, frames innermost last)."""

    def __init__(self, ident: int, interval: float = 0.001) -> None:
        super().__init__(daemon=True, name="stall-stacks")
        self.target, self.interval = ident, interval
        self.samples: list[tuple[float, tuple[str, ...]]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        old = sys.getswitchinterval()
        sys.setswitchinterval(0.001)
        try:
            while not self._stop_event.wait(self.interval):
                frame = sys._current_frames().get(self.target)
                stack = []
                while frame is not None:
                    code = frame.f_code
                    stack.append(f"{_short(code.co_filename)}:{code.co_name}")
                    frame = frame.f_back
                self.samples.append((time.perf_counter(), tuple(reversed(stack))))
        finally:
            sys.setswitchinterval(old)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def report(self, start: float, end: float) -> str:
        """The functions on the stack in [start, end], by how many samples had them (inclusive), and the
        innermost frames (exclusive), most first."""
        window = [s for t, s in self.samples if start <= t <= end]
        if not window:
            return "  (no samples)"
        inclusive: collections.Counter[str] = collections.Counter()
        leaf: collections.Counter[str] = collections.Counter()
        for stack in window:
            inclusive.update(set(stack))
            leaf[stack[-1]] += 1
        n = len(window)
        lines = [f"  {n} samples; on the stack (inclusive):"]
        lines += [f"    {c / n:5.0%} {f}" for f, c in inclusive.most_common(FRAMES_SHOWN)]
        lines.append("  innermost (exclusive):")
        lines += [f"    {c / n:5.0%} {f}" for f, c in leaf.most_common(10)]
        return "\n".join(lines)


def _short(path: str) -> str:
    for marker in ("site-packages/", "src/", "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path
