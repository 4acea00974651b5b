"""Resuming a DeepSpeed ZeRO checkpoint (train/checkpoint.py's DeepSpeed side).

Under the same ZeRO stage and world size DeepSpeed's own `load_checkpoint` reads it. Under another stage or
world size (ZeRO-3 -> ZeRO-1, ZeRO-1 -> ZeRO-3, 2 ranks -> 1) DeepSpeed's universal checkpoint carries the
weights *and* Adam's state: `deepspeed.checkpoint.ds_to_universal` (run in this process, one worker) writes
one folder per parameter (fp32 weights, exp_avg, exp_avg_sq), and the engine loads it with the config key
`checkpoint.load_universal`, each rank cutting its own partition.

DeepSpeed 0.19.8 writes that folder in two layouts: its ZeRO-3 converter for ZeRO-3 loaders, its ZeRO-1/2
converter for ZeRO-1/2 loaders, so a ZeRO-3 checkpoint does not load under ZeRO-1/2 (nor the reverse) as it
comes out. What differs, and what `_for_every_stage` adds so that either loader reads it:
- the model-states file the loader opens for its metadata: ZeRO-1/2 look for `mp_rank_00_model_states.pt`,
  ZeRO-3 for `zero_pp_rank_0_mp_rank_00_model_states.pt`; the converter copies only its own stage's name;
- each parameter's `fp32.pt` / `exp_avg.pt` / `exp_avg_sq.pt`: a bare tensor from the ZeRO-3 converter, a
  dict `{"param": tensor, "cat_dim": 0}` for the ZeRO-1/2 loader (the ZeRO-3 loader reads both);
- Adam's step: ZeRO-1/2 read it from each parameter's `step.pt`, ZeRO-3 from
  `zero/optimizer_state.pt["optimizer_state_dict"]`; each converter writes only its own;
- `zero/optimizer_state.pt["ds_version"]`, which ZeRO-1/2's loader asserts and ZeRO-3's optimizer does not save.
A ZeRO-1/2 checkpoint has no `universal_checkpoint_info` unless the model adds one (Megatron-DeepSpeed
does): the converter's own `inject_missing_state` option adds the default.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import contextlib
import glob
import io
import os
import shutil
from argparse import Namespace
from pathlib import Path

import torch

DS_DIR = "ds"  # DeepSpeed's checkpoint folder inside a checkpoint (tag "ds" inside it)
DS_TAG = "ds"
UC_TAG = "universal"
MODEL_STATES = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")


def to_universal(src: Path, out: Path) -> None:
    """DeepSpeed's checkpoint folder `src` (`.../ds/ds`) as a universal checkpoint `out` any ZeRO stage loads."""
    from deepspeed.checkpoint import ds_to_universal

    args = Namespace(
        input_folder=str(src),
        output_folder=str(out),
        num_extract_workers=1,  # in this process: no worker pool inside a training rank
        num_merge_workers=1,
        keep_temp_folder=False,
        strict=True,
        inject_missing_state=True,
    )
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):  # its progress lines
            ds_to_universal.main(args)
    except Exception as e:
        raise RuntimeError(f"ds_to_universal {src}: {e}\n{said.getvalue()[-2000:]}") from e
    _for_every_stage(out)


def _for_every_stage(out: Path) -> None:
    from deepspeed.checkpoint.constants import CAT_DIM, PARAM

    zero = out / "zero"
    optim_path = zero / "optimizer_state.pt"
    osd = torch.load(optim_path, weights_only=False)
    states = sorted(p for p in out.glob("*model_states.pt"))
    meta = torch.load(states[0], map_location="cpu", weights_only=False)
    osd.setdefault("ds_version", meta.get("ds_version"))
    inner = osd.get("optimizer_state_dict")
    step = None
    if inner is not None:  # from ZeRO-3: Adam's step for the ZeRO-1/2 loader
        step = next(iter(inner["state"].values()), {}).get("step")
    else:  # from ZeRO-1/2: for the ZeRO-3 loader
        steps = glob.glob(str(zero / "*" / "step.pt"))
        first = torch.load(steps[0], weights_only=False) if steps else None
        osd["optimizer_state_dict"] = {"state": {0: {"step": first}}, "param_groups": osd["param_groups"]}
    torch.save(osd, optim_path)
    for param in (p for p in zero.iterdir() if p.is_dir()):
        for key in ("fp32", "exp_avg", "exp_avg_sq"):
            f = param / f"{key}.pt"
            value = torch.load(f, weights_only=False) if f.exists() else None
            if torch.is_tensor(value):
                torch.save({PARAM: value, CAT_DIM: 0}, f)
        if step is not None and not (param / "step.pt").exists():
            torch.save(step, param / "step.pt")
    for name in MODEL_STATES:
        if not (out / name).exists():
            shutil.copy2(states[0], out / name)


def load(ds, path: Path, meta: dict, *, stage: int, world: int, run_dir: Path, barrier) -> str:
    """Load checkpoint `path` (its meta.json `meta`) into DeepSpeed engine `ds`, optimizer state included;
    returns how: "deepspeed" (the same stage and world size) or "universal"."""
    if meta.get("zero_stage") == stage and meta.get("world_size") == world:
        ds.load_checkpoint(
            str(path / DS_DIR), tag=DS_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        return "deepspeed"
    # one conversion per node (its first process), into the new run's folder; every rank then reads it
    node_dir = Path(run_dir) / ".universal" / f"node{os.environ.get('GROUP_RANK', '0')}"
    first_on_node = int(os.environ.get("LOCAL_RANK", "0")) == 0
    if first_on_node:
        shutil.rmtree(node_dir, ignore_errors=True)
        node_dir.mkdir(parents=True, mode=0o700)
        to_universal(path / DS_DIR / DS_TAG, node_dir / UC_TAG)
    barrier()
    cfg = ds._config
    cfg.load_universal_checkpoint = True  # DeepSpeed's `checkpoint.load_universal` key, for this load only
    try:
        ds.load_checkpoint(
            str(node_dir), tag=UC_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
    finally:
        cfg.load_universal_checkpoint = False
    barrier()
    if first_on_node:
        shutil.rmtree(node_dir.parent, ignore_errors=True)
    return "universal"


def zero_fp32(path: Path) -> dict:
    """A DeepSpeed checkpoint's whole fp32 weights (DeepSpeed's own consolidation, zero_to_fp32)."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(path / DS_DIR), tag=DS_TAG)
