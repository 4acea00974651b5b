"""SVG snapshots of every screen at 80x24, and of the four tabs at 120x40 too (pytest-textual-snapshot), from
the deterministic scenes in tests/support/tui_scenes.py (SNAPSHOTS). Regenerate after a deliberate UI change with
`pytest tests/tui/test_tui_snapshots.py --snapshot-update`, and look at the SVGs."""

import pytest

from tests.support.tui_scenes import SNAPSHOTS, scene_app, settle


@pytest.mark.parametrize("scene,size", SNAPSHOTS, ids=[f"{sc}-{w}x{h}" for sc, (w, h) in SNAPSHOTS])
def test_screen_snapshot(scene, size, snap_compare, tmp_path):
    app, keys = scene_app(scene, tmp_path)

    async def run_before(pilot):
        await settle(app, pilot)
        for k in keys:
            await pilot.press(k)
            await settle(app, pilot)

    assert snap_compare(app, terminal_size=size, run_before=run_before)
