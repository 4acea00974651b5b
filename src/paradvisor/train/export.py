"""A model out: the whole model gathered from any plan's shards, written as a Hugging Face folder.

`full_state_dict` is collective (every rank calls it) and returns the whole state dict on rank 0, with the
checkpoint names of the unwrapped model:
  single, DDP, FSDP2, TP, TP x DDP/FSDP, EP   torch's `get_model_state_dict(full_state_dict=True)`
  ZeRO-3                                       DeepSpeed's consolidated state dict (partitions gathered)
  ZeRO-1/2                                     the module's own state dict (parameters are whole)
  pipeline                                     each stage's tensors under their original names (DTensors made
                                               whole on the stage's mesh), gathered to rank 0
`write_hf_folder` writes config.json, safetensors weights (sharded with model.safetensors.index.json above
`max_shard_size`, through transformers' own `save_pretrained`) and the tokenizer, into a temporary folder
renamed into place, so `model/` is complete or absent. The checkpoint issue's `export --step N` calls the same
writer with the state dict of a checkpoint.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import os
from pathlib import Path

import torch.distributed as dist

from paradvisor.rundir import RunDir
from paradvisor.spec.model import resolved_config
from paradvisor.spec.preset import load_preset
from paradvisor.train.checkpoint import full_state_dict as checkpoint_state_dict
from paradvisor.train.folders import folder_in_place
from paradvisor.train.models import build_model, build_task
from paradvisor.train.weights import named_tensors


def _whole(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def full_state_dict(engine, kind: str, model, names: dict[int, str]) -> dict | None:
    """The whole model's state dict on rank 0 (CPU tensors), None on the other ranks. Collective."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    if kind == "deepspeed":
        ds = engine.engine
        if ds.zero_optimization_partition_weights():
            sd = ds._zero3_consolidated_16bit_state_dict()
        else:
            sd = ds.module.state_dict()
        return {k: v.detach().cpu().clone() for k, v in sd.items()} if rank == 0 and sd is not None else None
    if kind == "pp":
        local = {}
        for buffers in (False, True):
            for name, t, _, _ in sorted(
                named_tensors(engine.stage_mod, names, buffers=buffers), key=lambda x: x[0]
            ):
                if name not in local:
                    local[name] = _whole(t.detach()).cpu().clone()
        parts = [None] * dist.get_world_size() if rank == 0 else None
        dist.gather_object(local, parts, dst=0)
        if rank != 0:
            return None
        out = {}
        for part in parts:
            for k, v in part.items():
                out.setdefault(k, v)
        return out
    if not dist.is_initialized():
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return sd if rank == 0 else None


def _tokenizer_to_save(tokenizer):
    """A transformers tokenizer (saved as it is), or a tokenizer.json path wrapped as a fast tokenizer."""
    if tokenizer is None:
        return None
    if isinstance(tokenizer, (str, os.PathLike)):
        if not Path(tokenizer).is_file():
            return None
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_file=str(tokenizer))
    return tokenizer


def write_hf_folder(
    model, state_dict: dict, out: Path, *, tokenizer=None, max_shard_size: str = "5GB"
) -> Path:
    """`out/` as a Hugging Face folder of `model`'s class and config holding `state_dict`; written beside and
    renamed into place. Plain torch models (minGPT, VGG) get model.safetensors alone."""
    with folder_in_place(Path(out)) as tmp:
        sd = {k: v.contiguous() for k, v in state_dict.items()}
        if hasattr(model, "save_pretrained"):
            model.save_pretrained(tmp, state_dict=sd, max_shard_size=max_shard_size)
        else:
            from safetensors.torch import save_file

            save_file(_untie(sd), str(tmp / "model.safetensors"))
        tok = _tokenizer_to_save(tokenizer)
        if tok is not None:
            tok.save_pretrained(str(tmp))
    return Path(out)


def _untie(sd: dict) -> dict:
    """safetensors refuses tensors sharing memory: a copy for each repeat."""
    seen, out = set(), {}
    for k, v in sd.items():
        key = v.untyped_storage().data_ptr()
        out[k] = v.clone() if key in seen else v
        seen.add(key)
    return out


def export_run_model(
    engine, kind: str, model, names: dict[int, str], out: Path, *, tokenizer, max_shard_size: str
):
    """Gather (every rank) and write (rank 0) `out/`; returns the path on rank 0, None elsewhere."""
    sd = full_state_dict(engine, kind, model, names)
    path = None
    if sd is not None:
        path = write_hf_folder(_unwrapped(model), sd, out, tokenizer=tokenizer, max_shard_size=max_shard_size)
    if dist.is_initialized():
        dist.barrier()
    return path


def _unwrapped(model):
    """A fresh meta-device twin of a Hugging Face model (same class and config, untouched by the plan's cuts and
    wraps) to save with; a plain torch model as it is."""
    model = getattr(model, "module", model)
    if not hasattr(model, "save_pretrained"):
        return model
    from accelerate import init_empty_weights

    with init_empty_weights():
        return type(model)(model.config)


def export_checkpoint(run_dir: Path, checkpoint: Path, out: Path, *, max_shard_size: str = "5GB") -> Path:
    """`paradvisor export RUN_DIR --step N`: a checkpoint's weights as the same Hugging Face folder a finished
    run leaves in model/, on this one process. The model is rebuilt the trainer's way (the run's plan.toml, its
    tokenizer and vocabulary) with its parameters on the meta device; the checkpoint's whole state dict (DCP's
    shards put together, or DeepSpeed's zero_to_fp32) goes into save_pretrained."""
    import torch

    preset = load_preset(RunDir(run_dir).plan)
    family, cfg = resolved_config(preset)
    task, vocab = build_task(preset, family, cfg, Path(run_dir), 0, lambda: None)
    if vocab and family != "vgg" and vocab > int(cfg["vocab_size"]):
        cfg["vocab_size"] = vocab  # as the trainer grew it (train/run.py)
    with torch.device("meta"):
        model = build_model(preset, family, cfg, task, empty=True)
    sd = checkpoint_state_dict(checkpoint)
    want = set(_unwrapped(model).state_dict())
    missing = sorted(want - set(sd))
    if missing and not hasattr(model, "save_pretrained"):  # transformers ties/derives some names itself
        raise ValueError(f"{checkpoint}: the checkpoint has no {missing[0]} (and {len(missing) - 1} more)")
    sd = {k: v.float() if v.is_floating_point() else v for k, v in sd.items() if k in want}
    return write_hf_folder(
        _unwrapped(model), sd, out, tokenizer=task.tokenizer, max_shard_size=max_shard_size
    )
