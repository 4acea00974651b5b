"""SVG snapshots of every screen at 80x24, and of the four tabs at 120x40 too (pytest-textual-snapshot), from
the deterministic scenes in tests/support/tui_scenes.py (SNAPSHOTS). Regenerate after a deliberate UI change with
`pytest tests/tui/test_tui_snapshots.py --snapshot-update`, and look at the SVGs."""

import difflib
import html
import pickle
import re

import pytest

from tests.support.tui_scenes import SNAPSHOTS, scene_app, settle


def screen_lines(svg: str) -> list[str]:
    """The text an SVG screenshot shows, a line per terminal row (its <text> elements grouped by their y)."""
    rows: dict[float, list[str]] = {}
    for m in re.finditer(r'<text[^>]*\by="([0-9.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(m.group(1)), []).append(html.unescape(m.group(2)).replace("\xa0", " "))
    return ["".join(rows[y]).rstrip() for y in sorted(rows)]


def what_differs(request) -> str:
    """A failed comparison's text diff, expected then shown (CI prints no HTML report): the lines that moved,
    or that only colours or styles differ."""
    from pytest_textual_snapshot import node_to_report_path

    data = pickle.loads(node_to_report_path(request.node).read_bytes())
    expected, actual = str(data[1]), str(data[2])
    diff = difflib.unified_diff(
        screen_lines(expected), screen_lines(actual), "snapshot", "this run", lineterm=""
    )
    return "\n".join(diff) or "the same text: only colours or styles differ"


def test_the_diff_of_two_screens_names_the_lines_that_moved():
    one = '<text x="0" y="20.5">a&#160;b</text><text x="9" y="20.5">c</text><text x="0" y="44.9">z</text>'
    assert screen_lines(one) == ["a bc", "z"]
    assert screen_lines(one.replace(">z<", ">y<")) == ["a bc", "y"]


@pytest.mark.parametrize("scene,size", SNAPSHOTS, ids=[f"{sc}-{w}x{h}" for sc, (w, h) in SNAPSHOTS])
def test_screen_snapshot(scene, size, snap_compare, tmp_path, request):
    app, keys = scene_app(scene, tmp_path)

    async def run_before(pilot):
        await settle(app, pilot)
        for k in keys:
            await pilot.press(k)
            await settle(app, pilot)

    same = snap_compare(app, terminal_size=size, run_before=run_before)
    assert same, what_differs(request)
