"""Small renderables and widgets: the per-GPU memory bar (stacked by term), the tables' DataTable."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import DataTable

from paradvisor.estimate.peak import peak_bytes

COLORS = {
    "params": "cyan",
    "grads": "magenta",
    "optimizer": "yellow",
    "step_grads": "bright_magenta",
    "gathered": "blue",
    "working": "bright_blue",
    "activations": "green",
    "buffers": "red",
    "transient": "bright_red",
    "overhead": "grey50",
}


def memory_bar(
    breakdown: dict[str, float], capacity: float, usable: float, width: int = 60, total: float | None = None
) -> Text:
    """A bar of `width` cells: each memory term in its colour, then free space; a mark at the usable limit."""
    t = Text()
    used = 0
    for k, v in breakdown.items():
        if k == "step_grads":  # the optimizer step's own phase: in the total and the legend, not stacked
            continue
        cells = int(round(width * v / capacity)) if capacity else 0
        cells = min(cells, width - used)
        if cells > 0:
            t.append("█" * cells, style=COLORS.get(k, "white"))
            used += cells
    limit = int(width * usable / capacity) if capacity else width
    for i in range(used, width):
        t.append("│" if i == limit else "░", style="grey35")
    if total is None:  # the forward/backward and optimizer-step phases do not coexist
        total = peak_bytes(breakdown)
    t.append(f" {total / 2**30:.1f}/{capacity / 2**30:.0f} GiB\n")
    for k, v in breakdown.items():
        if v:
            t.append("■ ", style=COLORS.get(k, "white"))
            t.append(f"{k} {v / 2**30:.2f}  ")
    return t


class SteadyTable(DataTable):
    """A DataTable whose cells are rendered once per content, not again when it is first laid out.

    Textual's DataTable counts a Resize as an update (`_update_count`), the key of every cached cell, row and
    line; a table gets its first Resize just after its first paint (the Hardware table at start, the plans
    table when its tab first shows), so every visible cell was rendered through rich a second time: 15-20 ms
    of the UI thread (benchmarks/tui_stall.py). A cell's rendering does not depend on the table's size (its
    column's width does not); a row's does (it is filled out to the table's width), and a line's cache key
    has the width: so only the rows' cache is cleared here, in place of DataTable's own handler (Textual calls
    each class's `_on_resize` down the MRO unless one prevents the default)."""

    def _on_resize(self, event: events.Resize) -> None:
        event.prevent_default()
        self._row_render_cache.clear()
