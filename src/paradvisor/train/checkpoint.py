"""Checkpoints on the rank side: save, load, keep the newest k, stop gracefully (a model: torchtitan's
components/checkpoint.py).

Torch engines (DDP, FSDP2, HSDP, TP, PP, EP, DiLoCo's inner engines) save one torch.distributed.checkpoint
(DCP) of {"model", "optim"} built by `get_state_dict` (fully qualified names of the *unwrapped* model, DTensor
shards as they are): DCP reshards on load, so a checkpoint of one plan loads under another (DDP -> FSDP2,
dp -> tp, PP -> DDP, another world size). Pipeline stages are saved under the whole model's names (stage k's
`blocks.0` is the model's `blocks.<lo>`). DeepSpeed ZeRO saves with its own `save_checkpoint`; another ZeRO stage or world size loads it
with the optimizer state through DeepSpeed's universal checkpoint (train/dsresume.py); the torch engines load
its weights only (`zero_to_fp32`, with `train.reset_optimizer`). Every checkpoint also holds each rank's RNG states, and its
meta.json the step, the data position (global samples consumed) and the plan it was written under.

A checkpoint is written into `.step-N.partial` and renamed `step-N` once every rank's data is on disk
(rundir/checkpoints.py); DCP's async save runs the write on a thread (its own gloo group) while training
goes on, and the rename happens when it completes. SIGTERM (the launcher's graceful stop, Slurm's
pre-emption) or SIGUSR2 asks every rank to save at the next step boundary and stop (all ranks agree at the
boundary: one small all-reduce per step).
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves

from paradvisor.rundir.checkpoints import (
    PIECES_ENV,
    checkpoint_root,
    ensure_root,
    finalize,
    make_private_dir,
    purge,
    read_meta,
    temp_name,
)
from paradvisor.rundir.phases import announce, write_seconds
from paradvisor.spec.faults import from_env
from paradvisor.spec.model import resolved_config
from paradvisor.train import dsresume
from paradvisor.train.dsresume import DS_DIR, DS_TAG, zero_fp32
from paradvisor.train.faults import StopRequest
from paradvisor.train.metrics import count_bytes, whole_size
from paradvisor.train.rng import rng_state, set_rng_state

DCP_DIR = "dcp"  # the DCP folder inside a checkpoint
RNG_DIR = "rng"


def _rename(d: dict, names: dict[str, str]) -> dict:
    return {names.get(k, k): v for k, v in d.items()}


# The optimizer state flattened per parameter ("state.<fqn>.exp_avg", "param_groups.<fqn>.lr"), as torchtitan
# saves it: every key names its parameter, so pipeline stages (which hold different parameters and would
# otherwise write one "param_groups" list each under the same key) and other plans all meet by name.
FLAT = {"flatten_optimizer_state_dict": True}


def _optim_rename(osd: dict, names: dict[str, str]) -> dict:
    out = {}
    for key, value in osd.items():
        for prefix in ("state.", "param_groups."):
            if key.startswith(prefix):
                fqn, _, leaf = key[len(prefix) :].rpartition(".")
                key = f"{prefix}{names.get(fqn, fqn)}.{leaf}"
                break
        out[key] = value
    return out


class Checkpointer:
    """One rank's checkpoints for one run: `resume()` before the first step, `after_step(step)` after each
    (returns True when the run should stop), `close()` at the end."""

    def __init__(self, preset, run_dir: Path, engine, kind: str, model, rank: int, world: int, writer=None):
        self.preset, self.t = preset, preset.train
        self.engine, self.kind, self.model = engine, kind, model
        self.rank, self.world, self.writer = rank, world, writer
        self.run_dir = Path(run_dir)
        # a shared checkpoint_dir keeps the run's checkpoints under the run's name (the same on every node)
        cdir = preset.launch.checkpoint_dir
        name = (os.environ.get("PARADVISOR_RUN_NAME") or Path(run_dir).name) if cdir else Path(run_dir).name
        self.root = checkpoint_root(Path(run_dir).parent / name, cdir)
        self.stop = StopRequest()
        # without a shared folder on the ssh engine each node's first process writes its node's part
        # (launch/ckptcopy.py copies every node's part to the launching machine)
        pieces = os.environ.get(PIECES_ENV) == "1" and os.environ.get("LOCAL_RANK") == "0"
        self.leader = rank == 0 or pieces
        # two gloo groups of every rank: one for the stop flags and barriers of the training thread, one for
        # DCP's writes (an async save runs its collectives on a thread of its own), made at the first save or
        # load, which every rank reaches together (a run that never saves holds no idle gloo threads)
        self.group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        self._io_group = None
        self.pending = None  # (future, step, tmp folder, meta, started)
        self.expect_s = 0.0  # the save in flight's expected seconds (its phase record, rundir/phases.py)
        self.last_save = time.monotonic()
        self.extra_state = None  # DiLoCo: callable -> (tensors to save, restore function)
        self.meta_extra: dict = {}
        self.optim_key = "optim"  # DiLoCo: one per node ("optim-node1"), each node's inner AdamW differs
        self.fault = from_env()

    @property
    def io_group(self):
        """The gloo group of DCP's collectives (torch.distributed.checkpoint), made on first use."""
        if self._io_group is None and dist.is_initialized():
            self._io_group = dist.new_group(backend="gloo")
        return self._io_group

    # ------------------------------------------------------------------ what is saved

    def _pp_names(self) -> dict[str, str]:
        """Stage parameter names -> the whole model's names (every alias of a tied weight maps to its first;
        train/stages.WholeNames, which also names chunks cut from copies of the model)."""
        return self.engine.whole_names.of(self.engine.stage_mod)

    def _torch_states(self, with_optim: bool = True) -> tuple[dict, callable]:
        """(the DCP state dict, a function that applies a loaded one to the model and optimizer)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

        module = self.engine.stage_mod if self.kind == "pp" else self.engine.model
        opts = StateDictOptions(**FLAT)
        msd, osd = get_state_dict(module, self.engine.opt, options=opts)
        names = self._pp_names() if self.kind == "pp" else {}
        back = {v: k for k, v in names.items()}
        sd = {"model": _rename(msd, names)}
        if self.kind == "pp":  # a tied weight's other alias, so a one-stage model finds both names
            for first, others in self.engine.whole_names.aliases.items():
                if first in sd["model"]:
                    for alias in others:
                        sd["model"][alias] = sd["model"][first]
        if with_optim:
            sd[self.optim_key] = _optim_rename(osd, names)
        extra = self.extra_state() if self.extra_state else None
        if extra is not None:
            sd["extra"] = extra[0]

        def apply(loaded: dict) -> None:
            m = {back.get(k, k): v for k, v in loaded["model"].items() if back.get(k, k) in msd}
            if with_optim:
                o = _optim_rename(loaded[self.optim_key], back)
                set_state_dict(module, self.engine.opt, model_state_dict=m, optim_state_dict=o, options=opts)
            else:
                from torch.distributed.checkpoint.state_dict import set_model_state_dict

                set_model_state_dict(module, m)
            if extra is not None:
                extra[1](loaded["extra"])

        return sd, apply

    def _meta(self, step: int, samples: int) -> dict:
        family, _cfg = resolved_config(self.preset)
        return {
            "format": "deepspeed" if self.kind == "deepspeed" else "dcp",
            "engine": self.kind,
            "zero_stage": self.preset.plan.zero_stage if self.kind == "deepspeed" else 0,
            "samples_consumed": samples,
            "world_size": self.world,
            "plan": self.preset.plan.to_dict(),
            "label": self.preset.plan.label(),
            "model": self.preset.workload.model,
            "family": family,
            "model_overrides": dict(self.t.model_overrides),
            "dataset": self.t.dataset,
            "data_path": self.t.data_path,
            "optimizer": self.preset.workload.optimizer,
            "lr_schedule": {"lr": self.t.lr, "warmup_steps": self.t.warmup_steps, "steps": self.t.steps},
            "global_batch": self.preset.workload.global_batch,
            "time": time.time(),
            **self.meta_extra,
        }

    # ------------------------------------------------------------------ saving
    def due(self, step: int) -> bool:
        every = self.t.checkpoint_every
        return bool(every) and step % every == 0

    def after_step(self, step: int, samples: int) -> bool:
        """Save when due (every N steps, every M minutes, or asked to stop); True when the run stops now."""
        self._poll()
        timed = bool(self.t.checkpoint_minutes) and (
            time.monotonic() - self.last_save >= 60 * self.t.checkpoint_minutes
        )
        flags = torch.tensor([int(self.stop.requested), int(timed)])
        if self.group is not None and self.world > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.group)
        stop, timed = bool(flags[0]), bool(flags[1])
        if self.due(step) or timed or stop:
            self.save(step, samples, blocking=stop)
        if stop and self.writer is not None:
            self.writer.write({"kind": "stopped", "step": step, "signal": self.stop.signal or "peer"})
        return stop

    def save(self, step: int, samples: int, *, blocking: bool = False) -> None:
        self.wait()  # one checkpoint in flight at a time
        t0 = time.perf_counter()
        tmp = self.root / temp_name(step)
        if self.leader:
            ensure_root(self.root)
            if tmp.exists():  # left by a run killed while writing this step
                shutil.rmtree(tmp)
            make_private_dir(tmp)
            for sub in (
                RNG_DIR,
                DS_DIR if self.kind == "deepspeed" else DCP_DIR,
            ):  # what DCP/DeepSpeed write into
                make_private_dir(tmp / sub)
        self._barrier()
        torch.save(rng_state(), tmp / RNG_DIR / f"rank-{self.rank}.pt")
        meta = self._meta(step, samples)
        future = None
        if self.kind == "deepspeed":
            # 16-bit weights, fp32 master, Adam's m and v: ~16 bytes a parameter, split over the ranks
            params = whole_size(self.model)
            self._announce(step, 16 * params / self.world)
            self.engine.engine.save_checkpoint(str(tmp / DS_DIR), tag=DS_TAG, save_latest=False)
            self._barrier()
        else:
            import torch.distributed.checkpoint as dcp

            sd, _ = self._torch_states()
            self._announce(step, count_bytes({"state": tree_leaves(sd)})["state"])  # DTensors: local shards
            if self.t.checkpoint_async and not blocking:
                future = dcp.async_save(sd, checkpoint_id=str(tmp / DCP_DIR), process_group=self.io_group)
            else:
                dcp.save(sd, checkpoint_id=str(tmp / DCP_DIR), process_group=self.io_group)
        self.pending = (future, step, tmp, meta, t0, time.perf_counter() - t0)
        self.last_save = time.monotonic()
        if future is None:
            self._complete()

    def _announce(self, step: int, local_bytes: int) -> None:
        """The checkpoint phase record: every rank's share of the save, written to one folder."""
        self.expect_s = write_seconds(local_bytes * self.world)
        announce(self.writer, "checkpoint", self.expect_s, step)

    def _poll(self) -> None:
        """Finish an async save whose write is done (rank 0's future completes once every rank has written)."""
        if self.pending is not None and self.pending[0] is not None and self.pending[0].done():
            self._complete()

    def wait(self) -> None:
        if self.pending is not None:
            future, step = self.pending[:2]
            if future is not None and not future.done():  # waiting on an async save again
                announce(self.writer, "checkpoint", self.expect_s, step)
            self._complete()

    def _complete(self) -> None:
        future, step, tmp, meta, t0, blocked = self.pending
        self.pending = None
        if future is not None:
            future.result()
        if not self.leader:
            return
        if self.fault is not None:
            self.fault.mid_checkpoint(self.rank, step)
        final = finalize(tmp, self.root, step, meta)
        removed = purge(self.root, self.t.keep_checkpoints)
        if self.writer is not None and self.rank == 0:  # one record (each node completes its own part)
            m = read_meta(final) or {}
            self.writer.write(
                {
                    "kind": "checkpoint",
                    "step": step,
                    "path": str(final),
                    "bytes": sum(s for s, _ in (m.get("files") or {}).values()),
                    "write_s": time.perf_counter() - t0,
                    "blocked_s": blocked,
                    "async": future is not None,
                    "removed": [p.name for p in removed],
                }
            )

    def _barrier(self) -> None:
        if self.group is not None and self.world > 1:
            dist.barrier(group=self.group)

    def close(self) -> None:
        """Wait for an async save in flight, then make sure every rank sees it complete."""
        self.wait()
        self._barrier()

    # ------------------------------------------------------------------ loading
    def resume(self, stream=None) -> int:
        """Load train.resume_from (if set) into the engine and the data stream; returns its step (0: none)."""
        src = self.t.resume_from
        if not src:
            return 0
        path = Path(src)
        meta = read_meta(path)
        if meta is None:
            raise RuntimeError(f"{path}: not a complete checkpoint")
        t0 = time.perf_counter()
        reset, how = self.t.reset_optimizer, "dcp"
        if meta["format"] == "deepspeed" and self.kind == "deepspeed":
            how = self._load_deepspeed(path, meta, reset)
        elif meta["format"] == "deepspeed":
            self._load_weights(zero_fp32(path))
        elif self.kind == "deepspeed":
            self._load_weights(dcp_full_model(path))
        else:
            import torch.distributed.checkpoint as dcp

            sd, apply = self._torch_states(with_optim=not reset)
            dcp.load(sd, checkpoint_id=str(path / DCP_DIR), process_group=self.io_group)
            apply(sd)
        rng = path / RNG_DIR / f"rank-{self.rank}.pt"
        if meta.get("world_size") == self.world and rng.exists():
            set_rng_state(torch.load(rng, weights_only=False))
        if stream is not None:
            stream.load_state_dict({"samples_consumed": int(meta["samples_consumed"])})
        if self.writer is not None:
            self.writer.write(
                {
                    "kind": "resumed",
                    "step": int(meta["step"]),
                    "path": str(path),
                    "from_plan": meta.get("label"),
                    "load_s": time.perf_counter() - t0,
                    "reset_optimizer": bool(reset),
                    "loaded_as": how,
                }
            )
        return int(meta["step"])

    def _load_deepspeed(self, path: Path, meta: dict, reset: bool) -> str:
        """Load a DeepSpeed checkpoint into this DeepSpeed engine; returns how ("weights": a fresh optimizer)."""
        if reset:  # the weights only (DeepSpeed's fp32 consolidation) with a fresh optimizer
            self._load_weights(zero_fp32(path))
            return "weights"
        return dsresume.load(
            self.engine.engine,
            path,
            meta,
            stage=self.preset.plan.zero_stage,
            world=self.world,
            run_dir=self.run_dir,
            barrier=self._barrier,
        )

    def _load_weights(self, full: dict) -> None:
        """Whole fp32 weights into the engine's model (DeepSpeed <-> torch engines: weights only)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        if self.kind == "deepspeed":
            import deepspeed

            mod = self.engine.engine.module
            params = list(mod.parameters())
            with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
                if self.rank == 0 or self.preset.plan.zero_stage < 3:
                    mod.load_state_dict(full, strict=False)
            # ZeRO-1/2 keep fp32 master copies in the optimizer: refresh them from the loaded weights
            opt = self.engine.engine.optimizer
            if hasattr(opt, "refresh_fp32_params"):
                opt.refresh_fp32_params()
            return
        module = self.engine.stage_mod if self.kind == "pp" else self.engine.model
        names = self._pp_names() if self.kind == "pp" else {}
        mine = {k: full[names.get(k, k)] for k in _model_keys(module) if names.get(k, k) in full}
        set_model_state_dict(module, mine, options=StateDictOptions(full_state_dict=True, strict=False))


def _model_keys(module) -> list[str]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return list(get_model_state_dict(module).keys())


def dcp_full_model(path: Path) -> dict:
    """A DCP checkpoint's whole model state dict, read on this process alone (every shard put together)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        loaded = _load_state_dict_from_keys(keys={"model"}, checkpoint_id=str(path / DCP_DIR))
    return {k: v for k, v in loaded["model"].items() if torch.is_tensor(v)}


def full_state_dict(path: str | os.PathLike) -> dict:
    """Any complete checkpoint's whole model weights on one process (for export): {name: tensor}."""
    path = Path(path)
    meta = read_meta(path)
    if meta is None:
        raise ValueError(f"{path}: not a complete checkpoint")
    return zero_fp32(path) if meta["format"] == "deepspeed" else dcp_full_model(path)
