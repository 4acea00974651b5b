"""Apply a Plan to a model: one small function per concern, torchtitan-style, on a (pp, dp, tp) mesh.

  DDP                 torch.nn.parallel.DistributedDataParallel
  FSDP / HSDP         FSDP2 `fully_shard` per block, then the root (HSDP: 2-D mesh replicate x shard)
  TP (+SP)            `parallelize_module` with column/row plans per block (train/tp_plans.py)
  TP x DDP            TP on the tp dimension; gradients averaged over the dp dimension after backward
  TP x FSDP           TP on the tp dimension, FSDP2 on the dp dimension
  PP (x DP, x TP)     `torch.distributed.pipelining` stages over the blocks (train/stages.py), GPipe or
                      1F1B; each stage is TP'd on its tp group and FSDP'd (or its gradients averaged,
                      as DDP would) on its dp group
  EP (x DP)           transformers' `base_model_ep_plan`: experts sharded by expert, all-to-all token
                      dispatch; dense gradients averaged over all ranks, or EP x FSDP: experts
                      sharded over their expert-DP group, the rest over all ranks (train/experts.py)
  ZeRO-1/2/3          DeepSpeed engine (optional CPU offload), data parallel only
  checkpointing       activation checkpoint wrappers per block (selective: attention only)

Ranks are laid out in Megatron order — tp fastest, then dp, then pp — so a TP group is a run of
consecutive ranks inside one node. What the launcher can run is spec/capability.py (the same table the
search reads). Each engine offers the same few calls to the loop: forward_backward (or pipeline_step),
step, set_lr, memory_groups, and a Layout saying which data shard and which copy of the loss a rank has.
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn

from paradvisor.errors import InputError
from paradvisor.estimate.stages import rank_chunks
from paradvisor.spec.mesh import Coords, ParallelDims
from paradvisor.train.data_parallel import average_grads, local_shard
from paradvisor.train.engines import (
    FullyShard,
    Recompute,
    TensorParallel,
    Zero,
    apply_engines,
    engines_for,
    inner_engines,
    mesh_keep,
)
from paradvisor.train.mesh import build_mesh, sub_mesh
from paradvisor.train.metrics import count_bytes, deepspeed_state_groups, optimizer_state_tensors
from paradvisor.train.models import logits_of, loss_of
from paradvisor.train.recompute import apply_checkpointing, checkpointing_is_flag
from paradvisor.train.stages import build_stages, stage_blocks


def is_meta(module) -> bool:
    """Whether the module's parameters have no memory yet (weights read after the plan is applied)."""
    return any(p.is_meta for p in module.parameters())


def _autocast(device: torch.device, precision: str):
    if precision in ("bf16", "fp16"):
        return torch.autocast(
            device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16
        )
    return contextlib.nullcontext()


def _any_rank_tied(tied: list) -> bool:
    """Whether any stage holds a tied weight (all ranks must agree before creating groups)."""
    flag = torch.tensor([1 if tied else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def clip_grad_norm(params, max_norm: float, groups=(), also_scale=None) -> float:
    """clip_grad_norm_ over plain tensors and DTensors of any mesh (TP shards, FSDP shards, replicated
    embeddings), summed over `groups` whose ranks hold disjoint parameters (pipeline stages). Same formula
    as torch's: total 2-norm, coefficient max_norm / (norm + 1e-6) capped at 1."""
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    by_spec: dict = {}
    plain = []
    for g in grads:
        if isinstance(g, DTensor):
            by_spec.setdefault((id(g.device_mesh), tuple(g.placements)), []).append(g)
        else:
            plain.append(g)
    sq = torch.zeros((), dtype=torch.float64, device=grads[0].device if grads else "cpu")
    for group in by_spec.values():
        n = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in group]))
        sq += n.full_tensor().double() ** 2
    if plain:
        sq += (
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in plain])).double() ** 2
        )
    for group in groups:
        if group is not None:
            dist.all_reduce(sq, group=group)
    total = float(sq.sqrt())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for p in also_scale if also_scale is not None else params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return total


class TorchEngine:
    """Plain, DDP, FSDP2, TP, TP x DDP and TP x FSDP models under one torch AdamW."""

    def __init__(
        self,
        model,
        plan,
        train,
        device,
        *,
        kind: str,
        autocast: bool,
        layout: Coords,
        grad_reduce=None,
        context=None,
    ):
        self.model, self.plan, self.device, self.kind, self.layout = model, plan, device, kind, layout
        self.context = context  # CP: shards each batch over the rank's cp group (train/context.py)
        self.autocast = autocast and plan.precision in ("bf16", "fp16")
        # TP x DDP, EP: gradients reduced over their groups after backward (DDP's reducer cannot wrap DTensors)
        self.grad_reduce = grad_reduce
        foreach = False if plan.tp > 1 or plan.ep > 1 else None
        self.opt = torch.optim.AdamW(
            model.parameters(), lr=train.lr, weight_decay=train.weight_decay, foreach=foreach
        )
        self.clip = train.grad_clip
        self.scaler = (
            torch.amp.GradScaler("cuda") if plan.precision == "fp16" and device.type == "cuda" else None
        )
        self.last_groups = None
        self.grad_norm = None

    def _sync_ctx(self, last: bool):
        if self.kind == "ddp" and not last:
            return self.model.no_sync()
        if self.kind in ("fsdp", "tp+fsdp", "ep+fsdp") and hasattr(self.model, "set_requires_gradient_sync"):
            self.model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def forward_backward(self, inputs, targets, *, last: bool, scale: float) -> float:
        cp_ctx = contextlib.nullcontext()
        if self.context is not None:
            inputs, targets, cp_ctx = self.context.enter(inputs, targets)
        with self._sync_ctx(last), cp_ctx:
            with _autocast(self.device, self.plan.precision) if self.autocast else contextlib.nullcontext():
                loss = loss_of(logits_of(self.model, inputs), targets)
            scaled = loss * scale
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return float(loss.detach())

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self) -> None:
        params = [p for p in self.model.parameters()]
        if self.grad_reduce is not None:
            self.grad_reduce(params)
        if self.scaler:
            self.scaler.unscale_(self.opt)
        if self.clip > 0:
            self.grad_norm = clip_grad_norm(params, self.clip)
        self.last_groups = self.memory_groups()
        (self.scaler.step(self.opt) if self.scaler else self.opt.step())
        if self.scaler:
            self.scaler.update()
        self.last_groups = self.memory_groups()  # after the step the optimizer states exist
        self.opt.zero_grad(set_to_none=True)

    def memory_groups(self) -> dict:
        params = list(self.model.parameters())
        return {
            "params": params,
            "grads": [p.grad for p in params if p.grad is not None],
            "optimizer": optimizer_state_tensors(self.opt),
        }


class DeepSpeedEngine:
    """The runner of a model under DeepSpeed ZeRO (train/engines.Zero made `engine`)."""

    def __init__(self, engine, zero: Zero, plan, layout: Coords):
        self.engine, self.opt, self.config = engine, zero.opt, zero.config
        self.plan, self.layout = plan, layout
        self.model = self.engine
        self.last_groups = None
        self.step_grads_bytes = None
        self._watch_step()

    def _watch_step(self) -> None:
        """Measure the gradients alive inside the optimizer step (DeepSpeed's fp32 partition exists only then)."""
        inner = getattr(self.engine.optimizer, "optimizer", None)
        if inner is None or not hasattr(inner, "step"):
            return
        step = inner.step

        def watched(*a, **k):  # the fp32 gradients the optimizer steps on (of DeepSpeed's fp32 masters)
            masters = deepspeed_state_groups(self.engine)["optimizer"]
            fp32 = count_bytes({"g": [m.grad for m in masters if getattr(m, "grad", None) is not None]})["g"]
            self.step_grads_bytes = max(self.step_grads_bytes or 0, fp32)
            return step(*a, **k)

        inner.step = watched

    def forward_backward(self, inputs, targets, *, last: bool, scale: float) -> float:
        loss = loss_of(logits_of(self.engine, inputs), targets)
        # DeepSpeed divides by gradient_accumulation_steps itself; the loop's scale already did.
        self.engine.backward(loss * scale * self.plan.grad_accum)
        if last:
            self.last_groups = self.memory_groups()
        self.engine.step()  # steps the optimizer only at the accumulation boundary
        return float(loss.detach())

    def set_lr(self, lr: float) -> None:
        for g in self.engine.optimizer.param_groups:
            g["lr"] = lr

    @property
    def grad_norm(self) -> float | None:
        get = getattr(self.engine, "get_global_grad_norm", None)
        norm = get() if get else None
        return float(norm) if norm is not None else None

    def step(self) -> None:
        groups = self.memory_groups()
        if self.last_groups is not None:
            groups["grads"] = self.last_groups["grads"] + groups["grads"]
        self.last_groups = groups

    def memory_groups(self) -> dict:
        g = deepspeed_state_groups(self.engine)
        return {"params": g["params"], "grads": g["grads"], "optimizer": g["optimizer"]}


class PipelineEngine:
    """The model cut into `pp` stages over its blocks (train/stages.py); a whole step is one schedule call
    (GPipe or 1F1B over grad_accum micro-batches). Each stage may be TP'd over its tp group and wrapped in
    DDP or FSDP over its dp group; the pipeline runs over the pp group."""

    def __init__(self, model, family: str, plan, train, device, dims: ParallelDims, layout: Coords, mesh):
        from torch.distributed.pipelining import (
            PipelineStage,
            Schedule1F1B,
            ScheduleGPipe,
            ScheduleInterleaved1F1B,
        )

        self.plan, self.layout, self.device = plan, layout, device
        v = plan.pp_virtual_stages if plan.pp_schedule == "interleaved1f1b" else 1
        if checkpointing_is_flag(model):
            apply_checkpointing(model, family, plan.checkpointing)
        mods, self.tied, self.whole_names = build_stages(
            model, family, layout.pp_rank, layout.pp, v=v, split=plan.pp_split
        )
        self.tied_group = self._tied_group(layout) if _any_rank_tied(self.tied) else None
        dp_mesh = sub_mesh(mesh, "dp")
        self.dp_group = None
        for stage_mod in mods:  # each stage: TP, recompute, FSDP (train/engines.py, in that order)
            if not is_meta(
                stage_mod
            ):  # a meta model is materialized from the weights after the plan is applied
                stage_mod.to(device)
            engines = [TensorParallel(family, root=model, blocks=stage_blocks)]
            if not checkpointing_is_flag(model):
                engines.append(Recompute(family, container=stage_mod))
            if dp_mesh is not None and plan.sharding == "fsdp":
                engines.append(FullyShard(dp_mesh, stage=True))
            apply_engines(stage_mod, dims, mesh, plan, engines)
        if dp_mesh is not None and plan.sharding != "fsdp":
            # DDP replicas of a stage: gradients averaged over the dp group once the schedule has run every
            # micro-batch (DDP's reducer expects one forward per backward, which a pipeline schedule breaks).
            self.dp_group = dp_mesh.get_group()
        # one module over the rank's chunks (a single chunk is itself: its parameter names stay as they were)
        self.stage_mod = mods[0] if len(mods) == 1 else nn.ModuleList(mods)
        self.model = self.stage_mod
        chunks = rank_chunks(layout.pp, v, layout.pp_rank)
        self.first, self.last = 0 in chunks, layout.pp * v - 1 in chunks
        pp_group = mesh["pp"].get_group()
        self.pp_group = pp_group
        stages = [PipelineStage(m, c, layout.pp * v, device, group=pp_group) for m, c in zip(mods, chunks)]
        loss = lambda out, y: loss_of(out, y)  # noqa: E731
        if v > 1:
            self.schedule = ScheduleInterleaved1F1B(stages, n_microbatches=plan.grad_accum, loss_fn=loss)
        else:
            cls = ScheduleGPipe if plan.pp_schedule == "gpipe" else Schedule1F1B
            self.schedule = cls(stages[0], n_microbatches=plan.grad_accum, loss_fn=loss)
        self.stage = stages[0]
        self.opt = torch.optim.AdamW(
            self.stage_mod.parameters(),
            lr=train.lr,
            weight_decay=train.weight_decay,
            foreach=False if plan.tp > 1 else None,
        )
        self.clip = train.grad_clip
        self.last_groups = None
        self.grad_norm = None

    @staticmethod
    def _tied_group(layout: Coords):
        """The group of the first and the last stage of this rank's (dp, tp) position (every rank creates
        every group, in the same order)."""
        mine = None
        rank = dist.get_rank()
        for d in range(layout.dp):
            for t in range(layout.tp):
                ranks = [d * layout.tp + t, (layout.pp - 1) * layout.dp * layout.tp + d * layout.tp + t]
                g = dist.new_group(ranks)
                if rank in ranks:
                    mine = g
        return mine

    def pipeline_step(self, inputs, targets) -> float | None:
        losses: list = []
        x = inputs["input_ids"]
        extra = {k: v for k, v in inputs.items() if k != "input_ids"}  # e.g. BERT's padding mask, every stage
        if self.first and self.last:
            raise InputError("a pipeline needs at least 2 stages")
        if self.first:
            self.schedule.step(x, **extra)
        elif self.last:
            self.schedule.step(target=targets, losses=losses, **extra)
        else:
            self.schedule.step(**extra)
        return float(torch.stack(losses).mean()) if losses else None

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self) -> None:
        params = list(self.stage_mod.parameters())
        if self.tied_group is not None:  # embedding and LM head: one weight, its two uses' gradients summed
            for p in self.tied:
                if p.grad is not None:
                    dist.all_reduce(local_shard(p.grad), group=self.tied_group)
        if self.dp_group is not None:
            average_grads(params, self.dp_group, self.layout.dp)
        if self.clip > 0:
            # the tied weight counts once in the norm: on the first stage
            counted = params if self.first else [p for p in params if not any(p is t for t in self.tied)]
            self.grad_norm = clip_grad_norm(counted, self.clip, groups=(self.pp_group,), also_scale=params)
        self.opt.step()
        self.last_groups = self.memory_groups()
        self.opt.zero_grad(set_to_none=True)

    def memory_groups(self) -> dict:
        params = list(self.stage_mod.parameters())
        return {
            "params": params,
            "grads": [p.grad for p in params if p.grad is not None],
            "optimizer": optimizer_state_tensors(self.opt),
        }


def build_engine(model, family: str, plan, train, device, rank: int, world: int, inner_mesh=None):
    """Wrap `model` as the Plan says; returns (runner, kind). The degrees are spec/mesh.ParallelDims, the
    mesh train/mesh.build_mesh, and the engines (train/engines.py) apply in one fixed order: TP / EP,
    recompute, then FSDP / DDP / DeepSpeed. `inner_mesh` (DiLoCo): the node's mesh
    (train/mesh.node_mesh), inside which the model is DDP'd or FSDP'd."""
    if not is_meta(model):
        model.to(device)
    if inner_mesh is not None:
        size = inner_mesh.size()
        dims = ParallelDims.of(plan.with_(dp=size), size)
        layout = Coords(pp=1, dp=size, tp=1, pp_rank=0, dp_rank=inner_mesh.get_local_rank(), tp_rank=0)
        mesh, choice = inner_mesh, inner_engines(family, plan, device, inner_mesh)
    else:
        dims = ParallelDims.of(plan, world)
        layout = dims.coords(rank)
        if dims.pp_enabled:
            mesh = build_mesh(dims, device.type)
            return PipelineEngine(model, family, plan, train, device, dims, layout, mesh), "pp"
        keep = mesh_keep(dims)
        mesh = build_mesh(dims, device.type, keep=keep) if keep is not None else None
        choice = engines_for(family, plan, train, device, dims, mesh, layout)
    model = apply_engines(model, dims, mesh, plan, choice.engines)
    if choice.kind == "deepspeed":
        return DeepSpeedEngine(model, choice.engines[-1], plan, layout), "deepspeed"
    runner = TorchEngine(
        model,
        plan,
        train,
        device,
        kind=choice.runner or choice.kind,
        autocast=choice.autocast,
        layout=layout,
        grad_reduce=choice.grad_reduce,
        context=choice.context,
    )
    return runner, choice.kind
