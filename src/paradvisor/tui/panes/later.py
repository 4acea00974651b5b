"""A tab whose widgets are mounted after the session's first paint, not composed with the screen.

The screen's first restyle walks every widget mounted, shown or not, in the same loop turn as its first layout
and paint, and so does every later whole-screen restyle (a modal window closing, a resize across a breakpoint:
benchmarks/tui_stall.py, issue 32 goal 5). The Plans and Launch tabs (43 of the 75 widgets) are mounted a turn
after the first paint by `ParadvisorApp.build_panes`, while the first tab is already on screen; the Monitor's
run view (30 more) the first time its tab shows. What arrives for a pane before then is kept by the pane and
shown once it is built (`on_built`); a tab shown before then waits for its widgets (`action_tab` awaits
`build`).

A pane's first show is one layout and paint of all its widgets in one turn; a pane with `STAGES` keeps those
parts of it hidden (CSS visibility: their room is kept, so nothing else moves) until it has been painted once
without them, then shows them a stage per paint: the Plans tab's first paint was the UI thread's longest stall
(50-80 ms of CPU at 130x42: benchmarks/tui_stall.py)."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

import asyncio

from textual.app import ComposeResult
from textual.compose import compose
from textual.widget import Widget
from textual.widgets import TabPane


class LaterPane(TabPane):
    """`content()` is this pane's compose, mounted by `build()`; `built` once it is mounted."""

    # selectors of the parts hidden until the pane's first paint, each group shown a paint after the one before
    STAGES: tuple[tuple[str, ...], ...] = ()

    built = False  # the content is mounted (its widgets' own on_mount done): it may be written to
    _mounting = None  # the content's mount once started (whoever needs the widgets awaits it)
    _shown = False  # the pane has been on screen (its Show event came)
    _staged: list[list[Widget]] | None = None  # the STAGES' widgets still hidden, the next stage first

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
            if not self._shown:
                self._hide_stages()
            self.on_built()

    def _hide_stages(self) -> None:
        self._staged = [[w for sel in stage for w in self.query(sel)] for stage in self.STAGES]
        for stage in self._staged:
            for widget in stage:
                widget.styles.visibility = "hidden"

    def on_show(self) -> None:
        """On screen (a Show comes after the paint that first shows the pane): the hidden stages follow."""
        self._shown = True
        self._show_next_stage()

    def _show_next_stage(self, _screen: object = None) -> None:  # _screen: the layout signal's argument
        """The next hidden stage shown (its inline visibility removed: the CSS's own applies again), and the one
        after it once the screen has been laid out and painted again (its layout signal: any layout from now on
        shows this stage)."""
        if not self.is_attached:  # the session closed
            return
        signal = self.screen.screen_layout_refresh_signal
        signal.unsubscribe(self)
        if not self._staged:
            return
        for widget in self._staged.pop(0):
            widget.styles.clear_rule("visibility")
            widget.refresh(layout=True)
        if self._staged:
            signal.subscribe(self, self._show_next_stage)

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
