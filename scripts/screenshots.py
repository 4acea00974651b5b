"""Regenerate screenshots/*.svg: every screen of the TUI, rendered headless from fixed inputs.

Run: python scripts/screenshots.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from paradvisor.tui.demo import SCENES, SIZE, scene_app, settle

OUT = Path(__file__).resolve().parent.parent / "screenshots"


async def shoot(scene: str, tmp: Path) -> Path:
    app, keys = scene_app(scene, tmp)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        for k in keys:
            await pilot.press(k)
            await settle(app, pilot)
        path = OUT / f"{scene}.svg"
        app.save_screenshot(filename=path.name, path=str(OUT))
        return path


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for scene in SCENES:
            print(asyncio.run(shoot(scene, Path(tmp))))


if __name__ == "__main__":
    main()
