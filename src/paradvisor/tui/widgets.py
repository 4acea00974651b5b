"""Small renderables: the per-GPU memory bar (stacked by term)."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from rich.text import Text

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
