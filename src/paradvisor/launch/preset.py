"""Preset files: a Plan plus its workload (and where it runs), as TOML.

Read with tomllib, written with tomli-w, atomically (temporary file + rename), never over an
existing file unless asked to. Presets are data: nothing in them is ever executed.
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from pathlib import Path

from paradvisor import __version__
from paradvisor.errors import InputError

SCHEMA = "paradvisor.preset/1"


def _clean(value):
    """tomli-w cannot write None: drop None entries recursively."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value if v is not None]
    return value


def write_toml_atomic(path: str | os.PathLike, data: dict, *, force: bool = False, header: str = "") -> Path:
    import tomli_w

    p = Path(path)
    if p.exists() and not force:
        raise InputError("already exists; pass --force to overwrite it", where=str(p))
    if p.parent and not p.parent.exists():
        raise InputError(f"folder {str(p.parent)!r} does not exist", where=str(p))
    text = header + tomli_w.dumps(_clean(data))
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent or "."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def preset_document(*, plan, workload, cluster_ref: dict, prediction: dict, name: str, description: str = "",
                    train: dict | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "name": name,
        "description": description,
        "workload": workload.to_dict(),
        "train": train or {},
        "cluster": cluster_ref,
        "plan": plan.to_dict(),
        "prediction": prediction,
    }


def save_preset(path: str | os.PathLike, doc: dict, *, force: bool = False) -> Path:
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = f"# paradvisor preset, written by paradvisor {__version__} on {stamp}\n"
    return write_toml_atomic(path, doc, force=force, header=header)
