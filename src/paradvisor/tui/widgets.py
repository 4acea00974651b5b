"""Small renderables and widgets: the per-GPU memory bar (stacked by term), the tables' DataTable, the footer, and
a Static's text set only when it changes."""

# ruff: noqa: TID253 - the TUI is the textual side: textual and rich at module level
from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.widgets._footer import FooterKey  # not exported by textual.widgets

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


def show_text(widget: Static, content) -> None:
    """`widget.update(content)` unless the widget shows that already. An update lays the whole screen out again
    (a Static's height may change: 10-40 ms of the UI thread at 130x42), and the Plans tab's model line was
    written again by every ranking as it started, the same line in a turn of its own beside the ranking's worker
    (benchmarks/tui_stall.py, "typing": that turn stretched to 70 ms of wall-clock time)."""
    if widget.content != content:
        widget.update(content)


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

    _paint_styles: dict | None = None  # the rich styles looked up in the paint under way (render_lines)

    def _on_resize(self, event: events.Resize) -> None:
        event.prevent_default()
        self._row_render_cache.clear()

    def _update_dimensions(self, new_rows) -> None:
        """A cell is cached at its column's width (the cache key has no width): when new rows widen a column,
        the cells cached before it are stale. DataTable's own Resize handler renewed them by chance (a paint
        between add_row and the idle-time measuring, which a loaded machine makes, left "server-1" cut to the
        header's "serv"); here a change of width renews them."""
        self._renew_if_widened(super()._update_dimensions, new_rows)

    def _update_column_widths(self, updated_cells) -> None:
        self._renew_if_widened(super()._update_column_widths, updated_cells)

    def _renew_if_widened(self, measure, arg) -> None:
        before = [c.get_render_width(self) for c in self.ordered_columns]
        measure(arg)
        if [c.get_render_width(self) for c in self.ordered_columns] != before:
            self._update_count += 1
            self.refresh()

    def render_lines(self, crop):
        """A paint, in which the table's own rich style and its components' are each computed once: DataTable
        asks for them on every line and row (45 times for the plans table, each a walk up the widget's ancestors,
        a quarter of its paint); no style changes while the table paints."""
        self._paint_styles = {}
        try:
            return super().render_lines(crop)
        finally:
            self._paint_styles = None

    @property
    def rich_style(self) -> Style:
        memo = self._paint_styles
        if memo is None:
            return DataTable.rich_style.fget(self)
        if "" not in memo:
            memo[""] = DataTable.rich_style.fget(self)
        return memo[""]

    def get_component_styles(self, *names: str):
        memo = self._paint_styles
        if memo is None:
            return super().get_component_styles(*names)
        if names not in memo:
            memo[names] = _PaintStyles(super().get_component_styles(*names))
        return memo[names]

    def _render_cell(self, row_index, column_index, base_style, width, cursor=False, hover=False):
        """A cell's lines: a one-line plain cell built directly (`_plain_cell`), any other by DataTable."""
        lines = self._plain_cell(row_index, column_index, base_style, width, cursor, hover)
        if lines is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        return lines

    def _plain_cell(self, row_index, column_index, base_style, width, cursor, hover):
        """The lines DataTable renders for a cell of plain text (no style, no markup, one line, fitting its
        column), built without rich's generic pipeline (`Styled(Padding(cell))` through `render_lines`: about
        0.1 ms a cell, most of a table's paint); the same segments, under the same cache key
        (tests/tui/test_cells.py compares the two on every cell of the session's tables). None for any other
        cell, and in tables with fixed rows, fixed columns or row labels (none here): DataTable renders those."""
        if column_index < 0 or self.fixed_rows or self.fixed_columns:
            return None
        header = row_index == -1
        row_key = self._header_row_key if header else self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        key = (
            row_key,
            column_key,
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        cached = self._cell_render_cache.get(key)
        if cached is not None:
            return cached
        if (self.header_height if header else self.rows[row_key].height) != 1:
            return None
        text = self._get_row_renderables(row_index).cells[column_index]
        inner = width - 2 * self.cell_padding
        if not _plain_line(text, inner):
            return None
        component, post = self._get_styles_to_render_cell(
            header,
            False,
            False,
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component
        lines = [
            _padded_line(text.plain, inner, self.cell_padding, pre, post, self.app.console.get_style("none"))
        ]
        self._cell_render_cache[key] = lines
        return lines


class _PaintStyles:
    """A component's styles during one paint: their rich style computed once, the rest as they are."""

    def __init__(self, styles) -> None:
        self._styles = styles
        self.rich_style = styles.rich_style

    def __getattr__(self, name: str):
        return getattr(self._styles, name)


def _plain_line(text, inner: int) -> bool:
    """`text` renders as itself on one line of `inner` cells: a Text without styles, justification or tabs that
    fits (what the cells of paradvisor's tables are, but for a moved plan's coloured mark)."""
    return (
        isinstance(text, Text)
        and inner >= 1
        and not text.spans
        and not text.style
        and text.justify in (None, "default")
        and text.end in ("", "\n")
        and "\n" not in text.plain
        and "\t" not in text.plain
        and cell_len(text.plain) <= inner
    )


def _padded_line(plain: str, inner: int, pad: int, pre: Style, post: Style, none: Style) -> list[Segment]:
    """One line as rich renders `Styled(Padding(Text(plain), (0, pad)), pre, post)`: the padding and the fill
    in Padding's style (`none`), the text in none at all, then each with `pre` before it and `post` after it
    (Segment.apply_style)."""

    def styled(style):
        if pre:
            style = pre + style
        if post:
            style = style + post if style else post
        return style

    line = [Segment(plain, styled(None))]
    if cell_len(plain) < inner:
        line.append(Segment(" " * (inner - cell_len(plain)), styled(none)))
    if pad:
        side = Segment(" " * pad, styled(none))
        line = [side, *line, side]
    return line


class SteadyFooter(Footer):
    """A Footer composed again only when the keys it shows would change.

    Textual's Footer is recomposed on every refresh of the bindings (each key widget removed, new ones mounted and
    styled, the whole screen laid out again: 15-25 ms of the UI thread); a tab switch refreshes them twice (the
    switch, then the focus moving into the tab), and a focus change within a tab once, mostly with the same keys
    (after the Plans tab's first paint: two such turns, benchmarks/tui_stall.py)."""

    _composed: tuple | None = None  # what the keys on show were composed from (`_keys`)

    def _keys(self) -> tuple:
        """What `Footer.compose` reads: whether the bindings are ready, the palette key's flag, and each active
        binding (frozen dataclasses: compared by value) with whether it is enabled and its tooltip."""
        bindings = self.screen.active_bindings.values() if self._bindings_ready else ()
        return (
            self._bindings_ready,
            self.show_command_palette,
            tuple((b, enabled, tooltip) for _node, b, enabled, tooltip in bindings),
        )

    def compose(self) -> ComposeResult:
        """Footer's keys, each bound one with the footer's `compact` already set: a FooterKey starts compact (its
        class `-compact` put on as it mounts) and takes the footer's value from its data binding just after, a
        restyle of the key each time (1-2 ms apiece, about 20 ms for the main screen's keys)."""
        self._composed = self._keys()
        for widget in super().compose():
            for key in (widget, *widget._pending_children):  # a group of keys holds its own
                # each key but the palette's is bound to the footer's `compact` (Footer.compose)
                if isinstance(key, FooterKey) and not key.has_class("-command-palette"):
                    key.set_reactive(FooterKey.compact, self.compact)
                    key.set_class(self.compact, "-compact", update=False)
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        """Footer's own (ready; recompose after the next refresh, if the app has focus and it is this screen's),
        but the recompose only if the keys differ from the ones shown."""
        self._bindings_ready = True
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        # not attached: a window's footer, the window closed since (Footer.recompose does nothing then either)
        if self.is_attached and self._keys() != self._composed:
            await self.recompose()
