"""Starting from the user's safetensors weights, straight into the plan's sharded layout.

The model is built on the meta device (parameters without memory; buffers such as rotary tables real), the plan
is applied to it (TP, FSDP2, pipeline cut), and only then is it materialized: each rank allocates its own
shards and reads from the safetensors files exactly the slices those shards hold (`safe_open(...).get_slice`),
so a rank never holds the whole model unless its plan replicates it (DDP and ZeRO-1/2 read everything). ZeRO-3
reads after DeepSpeed's initialize, each rank only its partitions' flat ranges (`load_zero3_partitions`). Names are the checkpoint's: the modules of the meta model are recorded
by identity before the plan wraps or cuts them, so a parameter's checkpoint name survives FSDP, TP, activation
checkpoint wrappers and pipeline stages (whose layer lists are renumbered).

`init = "pretrained" | "random" | "auto"` (auto: pretrained when the folder has weights; spec/weights.py finds
the folder and reads the files' headers). `check_weights` (names and shapes against the config's meta model)
runs at --dry-run and before any rank starts, in the launcher's child check (train/check.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.spec.model import resolved_config
from paradvisor.spec.weights import checkpoint_shapes, read_header, weight_files, weights_folder


def expected_shapes(preset) -> tuple[dict[str, tuple], dict[str, str]]:
    """({name: shape}, tied aliases) of the model the preset builds (a meta-device model: no memory)."""
    from paradvisor.train.models import Task, build_model  # noqa: PLC0415 - pulls torch: train/check.py (the preflight) imports this module torch-free

    family, cfg = resolved_config(preset)
    model = build_model(preset, family, cfg, Task("lm", None, preset.workload.seq_len), empty=True)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, tied_aliases(model)


def check_weights(preset) -> None:
    """The starting weights against the config: every parameter present (tied ones may be stored once), with
    the config's shape, and no tensor the model does not have."""
    folder = weights_folder(preset)
    if folder is None:
        return
    where = preset.path or "preset"
    have = checkpoint_shapes(folder)
    want, aliases = expected_shapes(preset)
    for name, (_, shape, f) in sorted(have.items()):
        if name not in want:
            raise InputError(
                f"tensor {name!r} is not a parameter of the configured model (names do not match the config)",
                where=str(f),
            )
        if tuple(shape) != want[name]:
            raise InputError(
                f"tensor {name!r} has shape {list(shape)}, the config makes it {list(want[name])}",
                where=str(f),
            )
    missing = [n for n in want if n not in have and aliases.get(n) not in have]
    if missing:
        raise InputError(
            f"{len(missing)} parameter(s) of the configured model missing from the weights, e.g. {missing[0]!r}",
            where=f"{where}: weights in {folder}",
        )


# ------------------------------------------------------------------------------------------------
# The torch side: names by module identity, materialize, read each rank's slices


def module_names(model) -> dict[int, str]:
    """{id(module): qualified name} of the unwrapped model, taken before the plan wraps or cuts it."""
    return {id(m): name for name, m in model.named_modules(remove_duplicate=False)}


def named_tensors(root, names: dict[int, str], *, buffers: bool = False):
    """(checkpoint name, parameter or buffer, owner module, attribute) of every tensor under `root` whose module
    was in the original model; a tied parameter once per name."""
    for m in root.modules():
        base = names.get(id(m))
        if base is None:
            continue
        items = m._buffers.items() if buffers else m._parameters.items()
        for attr, t in items:
            if t is None:
                continue
            if buffers and attr in getattr(m, "_non_persistent_buffers_set", ()):
                continue
            yield (f"{base}.{attr}" if base else attr), t, m, attr


def materialize(root, device) -> None:
    """Give the meta parameters of `root` memory on `device` (their shards only: DTensors stay sharded); buffers
    (built real) are kept."""
    import torch

    saved = [(m, k, b) for m in root.modules() for k, b in m._buffers.items() if b is not None]
    # swap in place: the optimizer (built with the plan) keeps holding the very Parameter objects; without it
    # TP's DTensor parameters would be replaced by new ones the optimizer never steps
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        root.to_empty(device=device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    with torch.no_grad():
        for m, k, b in saved:
            if b.device.type != "meta":
                m._buffers[k] = b.to(device)


def tied_aliases(model) -> dict[str, str]:
    """Checkpoint names of tied parameters that the file may store under the other name."""
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    out = {}
    for group in groups.values():
        for a in group:
            for b in group:
                if a != b:
                    out.setdefault(a, b)
    return out


def locations(folder: Path) -> dict[str, Path]:
    """The safetensors file holding each tensor name of the folder's weights."""
    return {k: f for f in weight_files(folder) for k in read_header(f)}


def load_shards(root, names: dict[int, str], aliases: dict[str, str], folder: Path) -> int:
    """Read into every parameter (and persistent buffer) under `root` its own part of the checkpoint: the whole
    tensor, or a DTensor's local shard. Returns the bytes read."""
    import torch
    from safetensors import safe_open
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    where = locations(folder)
    handles: dict[Path, object] = {}
    read = 0
    with torch.no_grad():
        for kind in (False, True):
            for name, t, _, _ in named_tensors(root, names, buffers=kind):
                key = name if name in where else aliases.get(name)
                if key not in where:
                    if kind:
                        continue  # a persistent buffer the file does not store keeps its built value
                    raise InputError(f"parameter {name!r} is not in the weights", where=str(folder))
                f = where[key]
                if f not in handles:
                    handles[f] = safe_open(str(f), framework="pt", device="cpu")
                sl = handles[f].get_slice(key)
                if isinstance(t, DTensor):
                    shape, offset = compute_local_shape_and_global_offset(
                        t.shape, t.device_mesh, t.placements
                    )
                    local = t.to_local()
                    if local.numel() == 0:
                        continue
                    idx = tuple(slice(o, o + s) for o, s in zip(offset, shape))
                    value = sl[idx]
                    local.copy_(value.to(local.dtype).view(local.shape))
                else:
                    value = sl[:]
                    t.copy_(value.to(t.dtype))
                read += value.numel() * value.element_size()
    return read


def _flat_range(sl, shape: tuple, start: int, end: int):
    """Elements [start, end) of a checkpoint tensor flattened, reading only the rows that hold them."""
    if len(shape) <= 1:
        return sl[start:end].reshape(-1)
    row = math.prod(shape[1:])
    first, last = start // row, -(-end // row)
    block = sl[first:last].reshape(-1)
    off = start - first * row
    return block[off : off + (end - start)]


def load_zero3_partitions(
    module, names: dict[int, str], aliases: dict[str, str], folder: Path, optimizer
) -> int:
    """ZeRO-3 from the user's weights without the whole model on any rank: DeepSpeed keeps each parameter as
    this rank's partition (`ds_tensor`: `ds_tensor.ds_numel` elements of the flattened tensor, at the rank's
    place in the parameter's group), so each rank reads from the safetensors file only that flat range (and a
    parameter it holds whole as well, a small persistent one, whole). The optimizer's fp32 copies, made from the
    empty model at initialize, are then refreshed from the loaded partitions. Returns the bytes read."""
    import torch
    import torch.distributed as dist
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from safetensors import safe_open

    where = locations(folder)
    handles: dict[Path, object] = {}
    read = 0
    with torch.no_grad():
        for name, p, _, _ in named_tensors(module, names):
            key = name if name in where else aliases.get(name)
            if key not in where:
                raise InputError(f"parameter {name!r} is not in the weights", where=str(folder))
            if where[key] not in handles:
                handles[where[key]] = safe_open(str(where[key]), framework="pt", device="cpu")
            sl = handles[where[key]].get_slice(key)
            part = p.ds_tensor
            start = part.ds_numel * dist.get_rank(group=p.ds_process_group)
            n = max(0, min(part.ds_numel, p.ds_numel - start))
            if n:
                flat = _flat_range(sl, tuple(p.ds_shape), start, start + n)
                part.narrow(0, 0, n).copy_(flat.to(part.dtype))
                read += flat.numel() * flat.element_size()
            if p.ds_status == ZeroParamStatus.AVAILABLE and p.data.numel() == p.ds_numel:
                whole = sl[:]
                p.data.copy_(whole.to(p.dtype).view(p.data.shape))
                read += whole.numel() * whole.element_size()
        for name, b, _, _ in named_tensors(module, names, buffers=True):  # buffers are whole on every rank
            key = name if name in where else aliases.get(name)
            if key in where:
                if where[key] not in handles:
                    handles[where[key]] = safe_open(str(where[key]), framework="pt", device="cpu")
                value = handles[where[key]].get_slice(key)[:]
                b.copy_(value.to(b.dtype))
                read += value.numel() * value.element_size()
    optimizer.refresh_fp32_params()
    return read
