"""A tab whose widgets are mounted after the session's first paint, not composed with the screen.

The screen's first restyle walks every widget mounted, shown or not, in the same loop turn as its first layout
and paint, and so does every later whole-screen restyle (a modal window closing, a resize across a breakpoint:
benchmarks/tui_stall.py, issue 32 goal 5). The Plans and Launch tabs (43 of the 75 widgets) are mounted a turn
after the first paint by `ParadvisorApp.build_panes`, while the first tab is already on screen; the Monitor's
run view (30 more) the first time its tab shows. What arrives for a pane before then is kept by the pane and
shown once it is built (`on_built`); a tab shown before then waits for its widgets (`action_tab` awaits
`build`)."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

import asyncio

from textual.app import ComposeResult
from textual.compose import compose
from textual.widgets import TabPane


class LaterPane(TabPane):
    """`content()` is this pane's compose, mounted by `build()`; `built` once it is mounted."""

    built = False  # the content is mounted (its widgets' own on_mount done): it may be written to
    _mounting = None  # the content's mount once started (whoever needs the widgets awaits it)

    def content(self) -> ComposeResult:
        raise NotImplementedError

    def on_built(self) -> None:
        """The widgets exist: show what arrived before they did."""

    async def build(self) -> None:
        """Mount the content (once; a second caller waits for the first one's mount)."""
        if self.built:
            return
        if self._mounting is None:
            self._mounting = asyncio.ensure_future(self._mount_parts())
        await asyncio.shield(self._mounting)
        if not self.built and self.is_attached:  # not a session that closed while it mounted
            self.built = True
            self.on_built()

    async def _mount_parts(self) -> None:
        """The content mounted a widget at a time (a container first, then what it holds), not all in one turn
        of the event loop: mounting the Plans tab's 27 widgets at once (each one styled as it registers)
        stalled the UI thread 30-40 ms while the first ranking ran beside it (benchmarks/tui_stall.py)."""
        await _one_by_one(self, compose(self, self.content()))


async def _one_by_one(parent, widgets) -> None:
    """Mount `widgets` (composed, each holding what it was composed with) into `parent`, each awaited before the
    next: a container is mounted empty, then its own widgets the same way, in the order they were composed.
    A session that closes meanwhile takes `parent` off the screen: the rest is not mounted."""
    for widget in widgets:
        if not parent.is_attached:
            return
        children, widget._pending_children = widget._pending_children, []
        await parent.mount(widget)
        await _one_by_one(widget, children)
