"""SVG snapshots of every screen (pytest-textual-snapshot), from the deterministic scenes in
paradvisor.tui.demo. Regenerate after a deliberate UI change with
`pytest tests/test_tui_snapshots.py --snapshot-update` (and `python scripts/screenshots.py`)."""

import pytest

from paradvisor.tui.demo import SCENES, SIZE, scene_app, settle


@pytest.mark.parametrize("scene", SCENES)
def test_screen_snapshot(scene, snap_compare, tmp_path):
    app, keys = scene_app(scene, tmp_path)

    async def run_before(pilot):
        await settle(app, pilot)
        for k in keys:
            await pilot.press(k)
            await settle(app, pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
