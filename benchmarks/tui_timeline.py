"""Where the TUI's UI-thread turns go: benchmarks/tui_stall.py's session (start included) with Textual's own
steps timed on the UI thread, for the loop turns that cost most CPU in each step of the session.

Run: python benchmarks/tui_timeline.py [--turns 3]

For each step ("start" is the app's start up to the first ranking's end, then each step of tui_stall.py after
it is done) the `--turns` costliest turns of the event loop (one asyncio callback each: UI-thread CPU and wall)
are printed with what ran inside them over 1 ms of CPU: each message a widget handled, the whole-screen and
subtree restyles (`update_nodes`, with the number of widgets walked), the layouts (`_refresh_layout`: `reflow`,
`render_update`) and each widget's render. The timing wraps Textual's methods, so the figures include their
own overhead (a few percent); compare trees side by side with the same script. The first turn listed under
"start" is the app's start up to its first screen; the turn with `ScreenResume -> Screen#_default` is its first
restyle, layout and paint (tui_stall.py's ticker starts after it).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TURN_S = 0.008  # loop turns over this much UI-thread CPU are kept
STEP_S = 0.001  # steps inside a turn over this much are printed


class Timeline:
    """(start, depth, what, cpu, wall) of the UI thread's loop turns (depth -1) and Textual's steps inside."""

    def __init__(self) -> None:
        self.ident = threading.get_ident()
        self.log: list[tuple[float, int, str, float, float]] = []
        self.depth = 0
        self.marks: list[tuple[float, str]] = []  # (when, "step: done") as tui_stall.py writes them

    def _timed(self, orig, label):
        """`orig` timed on the UI thread (a coroutine method: from its start to its end, awaits included)."""
        timeline = self

        def begin():
            timeline.depth += 1
            return time.perf_counter(), time.thread_time()

        def end(t0, c0, obj, a):
            timeline.depth -= 1
            cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
            timeline.log.append((t0, timeline.depth, label(obj, a), cpu, wall))

        if asyncio.iscoroutinefunction(orig):

            async def timed_async(obj, *a, **k):
                if threading.get_ident() != timeline.ident:
                    return await orig(obj, *a, **k)
                t0, c0 = begin()
                try:
                    return await orig(obj, *a, **k)
                finally:
                    end(t0, c0, obj, a)

            return timed_async

        def timed(obj, *a, **k):
            if threading.get_ident() != timeline.ident:
                return orig(obj, *a, **k)
            t0, c0 = begin()
            try:
                return orig(obj, *a, **k)
            finally:
                end(t0, c0, obj, a)

        return timed

    def wrap(self, cls, attr: str, label) -> None:
        setattr(cls, attr, self._timed(getattr(cls, attr), label))

    def install(self) -> None:
        from textual import _compositor
        from textual._styles_cache import StylesCache
        from textual.css.stylesheet import Stylesheet
        from textual.message_pump import MessagePump
        from textual.screen import Screen

        def nodes(_, a):
            return f"update_nodes({len(a[0])} widgets)" if isinstance(a[0], list) else "update_nodes"

        self.wrap(Stylesheet, "update_nodes", nodes)
        self.wrap(Screen, "_refresh_layout", lambda s, a: f"_refresh_layout {type(s).__name__}")
        self.wrap(_compositor.Compositor, "reflow", lambda s, a: "reflow")
        self.wrap(_compositor.Compositor, "render_update", lambda s, a: "render_update")
        self.wrap(StylesCache, "render_widget", lambda s, a: f"render {type(a[0]).__name__}#{a[0].id}")
        self.wrap(
            MessagePump,
            "_dispatch_message",
            lambda s, a: f"{type(a[0]).__name__} -> {type(s).__name__}#{getattr(s, 'id', None)}",
        )
        run = asyncio.events.Handle._run
        timeline = self

        def turn(handle):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return run(handle)
            finally:
                cpu = time.thread_time() - c0
                if cpu > TURN_S:
                    timeline.log.append((t0, -1, f"{handle._callback!r:.90}", cpu, time.perf_counter() - t0))

        asyncio.events.Handle._run = turn
        write = sys.stderr.write

        def mark(text):
            if text.endswith(": done\n"):
                self.marks.append((time.perf_counter(), text.strip()))
            return write(text)

        sys.stderr.write = mark

    def step_of(self, t: float) -> str:
        done = [name for when, name in self.marks if when < t]
        return f"after {done[-1]}" if done else "start"

    def report(self, turns: int) -> None:
        by_step: dict[str, list] = {}
        for entry in sorted((x for x in self.log if x[1] == -1), key=lambda x: -x[3]):
            by_step.setdefault(self.step_of(entry[0]), []).append(entry)
        for step, entries in by_step.items():
            for t0, _, what, cpu, wall in entries[:turns]:
                print(f"\n[{step}] loop turn: CPU {cpu * 1e3:.1f} ms, wall {wall * 1e3:.1f} ms ({what})")
                for s0, depth, name, scpu, _ in sorted(self.log):
                    if depth >= 0 and t0 <= s0 <= t0 + wall and scpu > STEP_S:
                        print(f"  {'  ' * depth}{name[:72]:72s} {scpu * 1e3:6.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=3, help="the N costliest loop turns of each step")
    args, rest = ap.parse_known_args()
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    import tui_stall

    timeline = Timeline()
    timeline.install()
    sys.argv = [sys.argv[0], *rest]  # tui_stall's own options (--model, --cluster)
    try:
        tui_stall.main()
    finally:
        timeline.report(args.turns)


if __name__ == "__main__":
    main()
