"""What keeps the session's start off the UI thread's longest stall (benchmarks/tui_stall.py, issue 32 goal 5):
each screen's breakpoint classes (the main screen's, a window's pushed over it) set before its first restyle,
the objects of the start frozen out of the garbage collector's walks, and the Plans and Launch tabs' widgets
(mounted a turn after the first paint: panes/later.py) mounted once the first ranking is done."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from paradvisor import collector

if TYPE_CHECKING:
    from paradvisor.tui.panes.plans import PlansPane

# the longest the tabs' mounting waits for the first ranking (a tab shown before then is built at once)
FIRST_RANKING_WAIT_S = 1.0


def breakpoint_classes(width: int, height: int, horizontal, vertical) -> set[str]:
    """The classes Textual's first Resize puts on a screen of this size (Screen._on_resize: on each axis, the
    class of the largest breakpoint not above the size). Set on the main screen before its first restyle, they
    are no change at that Resize; a change of classes on the screen restyles every widget on it, a second
    whole-screen restyle at start (26-28 ms of the UI thread's CPU at 75 widgets)."""
    classes = set()
    for size, points in ((width, horizontal), (height, vertical)):
        for at, name in sorted(points or (), reverse=True):
            if size >= at:
                classes.add(name)
                break
    return classes


def freeze_startup_objects() -> None:
    """Move what exists once the first screen is up (modules, classes, the widgets, the shipped data: about 100,000
    objects that live as long as the session) out of the garbage collector's reach. A full collection walks every
    tracked object while it holds the GIL, so on whichever thread it starts it stalled the UI thread 25-60 ms
    each time a worker's ranking had allocated enough (benchmarks/tui_stall.py); frozen objects are not walked.
    Garbage made later is still collected."""
    collector.freeze()


def with_breakpoint_classes(app, screen):
    """`screen` (a Screen; a screen's name is left as it is) with the classes its first Resize would put on it
    (`breakpoint_classes`, the app's breakpoints unless the screen has its own) set before its first restyle.
    A modal window got them at that Resize, a second restyle of its widgets and a second layout and paint of
    the window (the launch question: 10-15 ms of the UI thread as it first shows)."""
    from textual.screen import Screen

    if isinstance(screen, Screen):
        horizontal = (
            app.HORIZONTAL_BREAKPOINTS
            if screen.HORIZONTAL_BREAKPOINTS is None
            else screen.HORIZONTAL_BREAKPOINTS
        )
        vertical = (
            app.VERTICAL_BREAKPOINTS if screen.VERTICAL_BREAKPOINTS is None else screen.VERTICAL_BREAKPOINTS
        )
        screen.add_class(*breakpoint_classes(*app.size, horizontal, vertical), update=False)
    return screen


async def first_ranking_done(plans: PlansPane, timeout: float = FIRST_RANKING_WAIT_S) -> None:
    """Once the Plans pane's first ranking (asked for when the cluster, read or detected in a worker, comes)
    has ended, or after `timeout` seconds. The Launch and Plans tabs are mounted after it: Python runs one
    thread at a time (the GIL), and their mounting (pieces of 10-45 ms of the UI thread's CPU) beside the
    ranking's pure-Python work lost about every other slice to it, each piece up to twice its time in
    wall-clock stalls (benchmarks/tui_stall.py, "first ranking"). Both take the GIL in turn either way: the
    plans come about as soon."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while (plans.ranking is None or not plans.ranking.is_finished) and loop.time() < end:
        await asyncio.sleep(0.02)
