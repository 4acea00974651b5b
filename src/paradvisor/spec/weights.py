"""The user's starting weights as a description, without torch: which folder the run starts from (`train.init`
and `train.weights`, else the model folder), its safetensors files (an index's, else every *.safetensors) and
each tensor's name, dtype and shape read from the files' JSON headers. The trainer reads the same files into
the plan's shards (train/weights.py), after checking them against the model it builds.
"""

from __future__ import annotations

import json
import os
import stat
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


INDEX_LIMIT = 64 << 20  # an index maps every tensor name to its file: ~100 bytes a tensor
HEADER_LIMIT = 100 << 20  # a safetensors JSON header (the format's own cap)


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder: those its index names, else every *.safetensors. An index is a JSON
    object whose `weight_map` maps tensor names to file names in the same folder; anything else (a list, a path
    with '/' or '..') is refused."""
    from paradvisor.safeio import read_text  # noqa: PLC0415 - start-up: the advice path does not read weights

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            wmap = json.loads(read_text(index, what="safetensors index", limit=INDEX_LIMIT))["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise InputError("not a safetensors index (no weight_map)", where=str(index)) from None
        if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
            raise InputError(
                "not a safetensors index (weight_map is not {tensor: file name})", where=str(index)
            )
        files = []
        for name in sorted(set(wmap.values())):
            if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
                raise InputError(f"the index names {name!r}, not a file of this folder", where=str(index))
            if not (folder / name).is_file():
                raise InputError(f"the index names {name}, which is missing", where=str(index))
            files.append(folder / name)
        return files
    return sorted(f for f in folder.glob("*.safetensors") if not f.is_dir())  # read_header refuses a FIFO


PICKLED = (".bin", ".pt", ".pth", ".ckpt")  # torch.save'd weights (pytorch_model.bin), which runs do not load
TRAINER_STATE = (
    "training_args",
    "optimizer",
    "scheduler",
    "scaler",
    "rng_state",
)  # HF Trainer's, not weights


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
    if (
        not has and folder is not None and folder.is_dir()
    ):  # weights the run would not read: never a silent random init
        other = sorted(
            f.name
            for f in folder.glob("*")
            if f.suffix in PICKLED and not f.name.startswith(TRAINER_STATE) and f.is_file()
        )
        if other:
            raise InputError(
                f"holds {other[0]}{f' (and {len(other) - 1} more)' if other[1:] else ''} but no safetensors: "
                "runs start from safetensors weights (save the model with save_pretrained(..., "
                'safe_serialization=True)), or set train.init = "random" to train from scratch',
                where=str(folder),
            )
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
    """The tensors of a safetensors file, {name: (dtype, shape)}, from its JSON header alone (no torch); a file
    that is not one (not a regular file, a header that is not {name: {dtype, shape}}) is one InputError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError("not a regular file")
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > HEADER_LIMIT:
                raise ValueError("header too large")
            doc = json.loads(fh.read(n))
        out = {
            k: (v["dtype"], tuple(int(d) for d in v["shape"])) for k, v in doc.items() if k != "__metadata__"
        }
        if not all(isinstance(dt, str) and all(d >= 0 for d in shape) for dt, shape in out.values()):
            raise ValueError("a tensor without a dtype name or with a negative dimension")
    except (OSError, ValueError, struct.error) as exc:
        raise InputError(f"not a safetensors file ({exc})", where=str(path)) from None
    except (AttributeError, KeyError, TypeError):
        raise InputError(
            "not a safetensors file (its header is not {name: {dtype, shape}})", where=str(path)
        ) from None
    return out


def checkpoint_shapes(folder: Path) -> dict[str, tuple[str, tuple, Path]]:
    out = {}
    for f in weight_files(folder):
        for k, (dt, shape) in read_header(f).items():
            out[k] = (dt, shape, f)
    return out
