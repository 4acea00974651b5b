"""The user's starting weights as a description, without torch: which folder the run starts from (`train.init`
and `train.weights`, else the model folder), its safetensors files (an index's, else every *.safetensors) and
each tensor's name, dtype and shape read from the files' JSON headers. The trainer reads the same files into
the plan's shards (train/weights.py), after checking them against the model it builds.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from paradvisor.errors import InputError


DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder: those its index names, else every *.safetensors."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError):
            raise InputError("not a safetensors index (no weight_map)", where=str(index)) from None
        files = [folder / n for n in names]
        for f in files:
            if not f.is_file():
                raise InputError(f"the index names {f.name}, which is missing", where=str(index))
        return files
    return sorted(folder.glob("*.safetensors"))


def weights_folder(preset) -> Path | None:
    """Where the run's starting weights are (None: random init). train.weights, else the model folder."""
    t = preset.train
    where = preset.path or "preset"
    if preset.workload.model in ("gpt-mini", "vgg16"):
        if t.weights or t.init == "pretrained":
            raise InputError(
                "starting weights need a Hugging Face model folder", where=f"{where}: train.weights"
            )
        return None
    folder = Path(t.weights) if t.weights else None
    if folder is None and Path(preset.workload.model).is_dir():
        folder = Path(preset.workload.model)
    if folder is not None and folder.is_file():
        folder = folder.parent if folder.suffix == ".safetensors" else folder
    has = folder is not None and folder.is_dir() and bool(weight_files(folder))
    if t.init == "random":
        return None
    if t.init == "pretrained" and not has:
        raise InputError(
            "init = 'pretrained' but there are no safetensors weights"
            + (f" in {folder}" if folder is not None else " (no train.weights, no model folder)"),
            where=f"{where}: train.init",
        )
    if t.weights and not has:
        raise InputError(
            "no safetensors weights (*.safetensors) in the folder", where=f"{where}: train.weights"
        )
    return folder if has else None


def read_header(path: Path) -> dict:
    """The tensors of a safetensors file, {name: (dtype, shape)}, from its JSON header alone (no torch)."""
    try:
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100 << 20:
                raise ValueError("header too large")
            doc = json.loads(fh.read(n))
    except (OSError, ValueError, struct.error) as exc:
        raise InputError(f"not a safetensors file ({exc})", where=str(path)) from None
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in doc.items() if k != "__metadata__"}


def checkpoint_shapes(folder: Path) -> dict[str, tuple[str, tuple, Path]]:
    out = {}
    for f in weight_files(folder):
        for k, (dt, shape) in read_header(f).items():
            out[k] = (dt, shape, f)
    return out
