"""The TUI's UI thread under the work that used to freeze it (issue 32, goal 5): the longest stall of its event
loop, and the time from `L` to the launch question.

Run: python benchmarks/tui_stall.py [--model gpt-mini] [--cluster examples/clusters/paper000-two-servers.toml]

A headless session (Textual's run_test) with a ticker on the app's event loop that wakes every 5 ms and keeps
the longest gap between two wake-ups beyond the 5 ms (a stall: the loop was busy), and the longest stretch of CPU
time the UI thread spent between two wake-ups (time.thread_time: what a loaded machine cannot stretch; the wall
gap there also counts the time the thread waited for a core or for the GIL). Measured while the first
ranking runs, as the Plans tab is first shown (2: its first layout and paint), while "102496" is typed into the
sequence box one digit at a time, and from `L` (launch the selected plan) until the question is on screen and
until its prediction is filled in (the run is not started), then Esc until the screen below is painted again.
Goal: no stall over 50 ms, the question under 1 s after `L`.

The session waits with plain sleeps and posts its keys as a terminal's driver does: Textual's Pilot.pause and
Pilot.press post a callback into every widget of the screen (about 80) and wait for all of them, then lay out
and paint at once, a stall of the harness's own in every step (figures before 2026-11-27, branch tui42, have
it: the waits for the ranking polled with Pilot.pause every 10 ms).

--profile: a thread samples the UI thread's stack every millisecond (benchmarks/_stall_stacks.py) and the
functions on it during the longest stalls are printed after the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


async def session(model: str, cluster: str, profile: int = 0) -> None:
    import threading

    from _stall_stacks import StackSampler
    from textual import events

    from paradvisor.tui.app import ParadvisorApp
    from paradvisor.tui.screens import ConfirmLaunchScreen

    stall = {"max": 0.0, "phase": {}, "cpu_max": 0.0, "cpu": {}, "windows": []}
    sampler = StackSampler(threading.get_ident()) if profile else None
    phase = ["start"]

    async def ticker():
        """Wall gap between two wake-ups beyond the 5 ms, and the UI thread's own CPU time in that gap (what it
        did in one stretch: a loaded machine stretches the wall gap, not the CPU time)."""
        last, last_cpu = time.perf_counter(), time.thread_time()
        while True:
            await asyncio.sleep(0.005)
            now, cpu = time.perf_counter(), time.thread_time()
            gap, busy = now - last - 0.005, cpu - last_cpu
            last, last_cpu = now, cpu
            stall["max"] = max(stall["max"], gap)
            stall["phase"][phase[0]] = max(stall["phase"].get(phase[0], 0.0), gap)
            stall["cpu_max"] = max(stall["cpu_max"], busy)
            stall["cpu"][phase[0]] = max(stall["cpu"].get(phase[0], 0.0), busy)
            if gap > 0.02:
                stall["windows"].append((gap, busy, now - gap - 0.005, now, phase[0]))

    def key(name: str) -> None:
        """A key as a terminal's driver posts it to the app (Pilot.press would then wait on every widget)."""
        app.post_message(events.Key(name, name if len(name) == 1 else None))

    def ranked(generation: int) -> bool:
        """A ranking newer than `generation` was asked for and has been shown (no typing pause pending)."""
        p = app.plans
        return p._typing_timer is None and p._generation > generation and not p.table.loading

    async def until(pilot, cond, timeout=120):
        end = time.perf_counter() + timeout
        while not cond():
            if time.perf_counter() > end:
                note = f"screen={app.screen!r} launch pane: {app.launcher.message_line.render()!s:.300}"
                raise SystemExit(f"timed out in: {phase[0]} ({note})")
            await asyncio.sleep(0.01)
        sys.stderr.write(f"{phase[0]}: done\n")

    with tempfile.TemporaryDirectory() as tmp:
        app = ParadvisorApp(cluster=cluster, model=model, runs_dir=os.path.join(tmp, "runs"), live=False)
        async with app.run_test(size=(130, 42)) as pilot:
            tick = asyncio.create_task(ticker())
            if sampler:
                sampler.start()
            phase[0] = "first ranking"
            t0 = time.perf_counter()
            await until(pilot, lambda: app.rec is not None)
            first = time.perf_counter() - t0
            widgets = len(list(app.screen.walk_children()))  # what each restyle of the whole screen walks
            phase[0] = "2: the Plans tab's first paint"
            t0 = time.perf_counter()
            key("2")
            await asyncio.sleep(0.1)  # its first layout and paint, and the Resize events after them
            shown = time.perf_counter() - t0
            phase[0] = "typing 102496"
            box = app.query_one("#seq-len")
            gen = app.plans._generation
            t0 = time.perf_counter()
            for i in range(1, 7):  # one digit at a time, as fast typing makes the edits
                box.value = "102496"[:i]
                await asyncio.sleep(0.05)
            await until(pilot, lambda: ranked(gen))  # one ranking, once the digits paused
            typed = time.perf_counter() - t0
            gen = app.plans._generation
            box.value = "128"
            await until(
                pilot, lambda: ranked(gen) and app.rec is not None and app.rec.workload.seq_len == 128
            )
            await asyncio.sleep(0.2)  # the selected plan reaches the launch pane
            phase[0] = "L to question"
            t0 = time.perf_counter()
            app.action_launch_plan()
            await until(pilot, lambda: isinstance(app.screen, ConfirmLaunchScreen))
            question = time.perf_counter() - t0
            phase[0] = "prediction behind the question"
            await until(pilot, lambda: "predicted memory" in str(app.screen.text))
            predicted = time.perf_counter() - t0
            phase[0] = "Esc: the question closes"
            t0 = time.perf_counter()
            key("escape")
            await until(pilot, lambda: not isinstance(app.screen, ConfirmLaunchScreen))
            await asyncio.sleep(0.1)  # the main screen's repaint under it
            closed = time.perf_counter() - t0
            tick.cancel()
            if sampler:
                sampler.stop()
    print(f"{'step':36s} {'seconds':>8s} {'longest UI-thread stall: wall':>30s} {'its CPU':>8s}")
    rows = [
        ("first ranking", first),
        ("2: the Plans tab's first paint", shown),
        ("typing 102496", typed),
        ("L to question", question),
        ("prediction behind the question", predicted),
        ("Esc: the question closes", closed),
    ]
    for name, secs in rows:
        print(
            f"{name:36s} {secs:8.2f} {stall['phase'].get(name, 0.0) * 1e3:27.0f} ms "
            f"{stall['cpu'].get(name, 0.0) * 1e3:5.0f} ms"
        )
    print(
        f"{'longest UI-thread stall overall':36s} {'':8s} {stall['max'] * 1e3:27.0f} ms "
        f"{stall['cpu_max'] * 1e3:5.0f} ms  (goal: under 50 ms)"
    )
    print(f"widgets on the screen after the first ranking (each whole-screen restyle walks them): {widgets}")
    for gap, busy, start, end, name in sorted(stall["windows"], reverse=True)[:profile]:
        print(f"\nstall of {gap * 1e3:.0f} ms (UI-thread CPU {busy * 1e3:.0f} ms) in {name}:")
        print(sampler.report(start, end))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert-base-uncased")
    ap.add_argument("--cluster", default=str(REPO / "examples" / "clusters" / "paper000-two-servers.toml"))
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="print what the UI thread ran in the N longest stalls",
    )
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    asyncio.run(session(args.model, args.cluster, args.profile))


if __name__ == "__main__":
    main()
