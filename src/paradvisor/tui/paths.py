"""Where the TUI finds files named relative to nothing in particular: the example cluster files.

A relative cluster path is read from the current directory first; when it is not there and paradvisor
runs from a checkout (an editable install or `PYTHONPATH=src`), from the checkout, so that
`examples/clusters/...` works from any directory. An installed paradvisor has no checkout: only the
current directory counts. Shipped files (presets, rules) come from `paradvisor.shipped` instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import paradvisor


def checkout_root() -> Path | None:
    """The checkout this package runs from (the folder holding src/paradvisor and pyproject.toml), or None."""
    root = Path(paradvisor.__file__).resolve().parent.parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "paradvisor").is_dir() else None


def cluster_file(path: str) -> tuple[str, str]:
    """(the file to read, how to name it) for a cluster path typed or given on the command line.

    The name is relative: to the checkout for a file inside it (what the screen shows and a saved preset
    records), else to the current directory."""
    root = checkout_root()
    if path and root is not None and not Path(path).exists() and (root / path).exists():
        path = str(root / path)  # the shipped examples, from any working directory
    if root is not None and Path(path).is_relative_to(root):
        return path, str(Path(path).relative_to(root))
    return path, os.path.relpath(path)
