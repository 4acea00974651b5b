"""The tables' plain cells are built without rich's generic pipeline (tui/widgets.SteadyTable._plain_cell, issue 32
goal 5: most of a table's paint on the UI thread); what they show must be exactly what Textual's DataTable renders:
the same segments, styles included, for every cell of the session's tables, header and cursor row included."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.widgets import DataTable

from paradvisor.tui.app import ParadvisorApp
from paradvisor.tui.widgets import SteadyTable
from tests.tui.test_workers import C000, until


def compare(table: SteadyTable) -> int:
    """Every cell of `table`, in each cursor and hover state, rendered both ways; the number built directly."""
    built = 0
    rows = range(-1, table.row_count)
    for row in rows:
        base = table._get_row_style(row, table.rich_style)
        for column_index, column in enumerate(table.ordered_columns):
            width = column.get_render_width(table)
            for cursor, hover in ((False, False), (True, False), (False, True)):
                table._cell_render_cache.clear()
                direct = table._plain_cell(row, column_index, base, width, cursor, hover)
                table._cell_render_cache.clear()
                ours = SteadyTable._render_cell(table, row, column_index, base, width, cursor, hover)
                table._cell_render_cache.clear()
                textual = DataTable._render_cell(table, row, column_index, base, width, cursor, hover)
                assert ours == textual, (table.id, row, column_index, cursor, hover)
                built += direct is not None
    return built


def test_plain_cells_render_as_textual_renders_them(tmp_path):
    async def flow():
        app = ParadvisorApp(cluster=C000, runs_dir=str(tmp_path / "runs"), live=False)
        async with app.run_test(size=(130, 42)) as pilot:
            await until(pilot, lambda: app.rec is not None and not app.plans.table.loading)
            await pilot.press("2")
            await until(pilot, lambda: app.plans.table.row_count > 0 and app.plans.table.size.width > 0)
            plans, hardware = app.plans.table, app.hardware.table
            cells = sum(len(plans.ordered_columns) * 3 for _ in range(-1, plans.row_count))
            # almost every cell is plain text; a plan the rules moved has a coloured mark (rich renders it)
            assert compare(plans) > cells * 0.9
            assert compare(hardware) > 0
            moved = Text("3▲")
            moved.stylize("yellow", 1)
            plans.update_cell_at((0, 0), moved)
            plans.update_cell_at((1, 1), "[b]markup[/b]")
            plans.update_cell_at((2, 1), "x" * 200)  # wider than its column: cropped by rich
            compare(plans)
            await pilot.press("down", "down")  # the cursor elsewhere, the table focused
            compare(plans)
            plans._show_hover_cursor = True  # the mouse over the table
            compare(plans)

    asyncio.run(flow())


def test_a_cell_painted_before_its_row_widened_the_column_is_painted_again():
    """Cells are cached at their column's width and SteadyTable keeps them over a Resize. A paint between add_row
    and DataTable's idle-time measuring (a loaded machine makes one) cached "server-1" cut to the header's
    "node" width, and nothing renewed it: the Hardware tab showed "serv" (a flaky snapshot)."""
    from textual.app import App, ComposeResult

    class One(App):
        def compose(self) -> ComposeResult:
            yield SteadyTable(id="t")

    async def flow():
        app = One()
        async with app.run_test(size=(60, 8)) as pilot:
            table = app.query_one(SteadyTable)
            table.add_columns("node", "GPU")
            table.add_row("server-1", "TITAN RTX")
            narrow = table.render_line(
                1
            )  # painted before the idle-time measuring: cells at the header's widths
            assert "server-1" not in narrow.text
            await pilot.pause()  # idle: the new row's widths are measured
            assert "server-1" in table.render_line(1).text and "TITAN RTX" in table.render_line(1).text

    asyncio.run(flow())
