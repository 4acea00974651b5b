"""Folders that libraries write into (TensorBoard, save_pretrained): created private through the
safe-write helper (paradvisor.safeio: 0700, this user's, never through a link), and written whole or not at all
(a temporary folder beside the target, created exclusively, renamed into place). Torch-free."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from paradvisor.safeio import private_subdir


def run_subdir(run_dir: Path, name: str) -> Path:
    """RUN_DIR/name for a library to write into (TensorBoard): 0700, no links; kept when a resumed run has it."""
    return private_subdir(run_dir, name, exist_ok=True)


@contextlib.contextmanager
def folder_in_place(out: Path) -> Iterator[Path]:
    """A private temporary folder beside `out` (created exclusively) to fill; when the block ends without an error
    it replaces `out` (a folder already there is removed first), otherwise it is removed and `out` is untouched."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    name = f".{out.name}.tmp-{os.getpid()}"
    if (out.parent / name).is_dir() and not (out.parent / name).is_symlink():
        shutil.rmtree(out.parent / name)  # left by a process of this pid that died
    tmp = private_subdir(out.parent, name)
    try:
        yield tmp
        if os.path.lexists(out):
            if out.is_symlink() or not out.is_dir():
                os.unlink(out)
            else:
                shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
