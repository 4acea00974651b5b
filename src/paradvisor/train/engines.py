"""Parallelism engines: each one transforms a model for one concern of the plan, behind one protocol, and
`apply_engines` applies them in one fixed order (torchtitan's): model parallelism (TP, then EP) first, so
that its plans still find the submodules they name; recompute (activation checkpointing) next, around the
parallelized blocks; data parallelism (FSDP2 / HSDP, DDP, the bucketed gradient average, DeepSpeed ZeRO)
last, around everything. train/parallelize.py picks the engines of a plan (`engines_for`) and wraps the
result in the runner that trains it (TorchEngine, DeepSpeedEngine, PipelineEngine).

  role        engines
  tp          TensorParallel       parallelize_module with the family's column/row plans (train/tp_plans.py)
  ep          ExpertParallel       transformers' EP plan: experts sharded by expert (train/experts.py)
  recompute   Recompute            activation checkpointing per block (train/recompute.py)
  dp          FullyShard           FSDP2 per block then the root; HSDP on a 2-D (replicate, shard) mesh
              ExpertFullyShard     EP x FSDP: experts over their expert-DP ranks, the rest over all
              Replicate            torch DDP over a process group
              AverageGrads         gradients averaged after backward (DTensor parameters DDP cannot wrap)
              Zero                 DeepSpeed ZeRO-1/2/3 (deepspeed.initialize)
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import torch

from paradvisor.model import families
from paradvisor.rundir.dsconfig import deepspeed_config
from paradvisor.spec.mesh import ParallelDims
from paradvisor.train.context import ContextShard, ring_applies
from paradvisor.train.data_parallel import apply_fsdp, average_grads
from paradvisor.train.experts import apply_ep, apply_ep_fsdp, reduce_grads
from paradvisor.train.mesh import flat_mesh, sub_mesh
from paradvisor.train.models import blocks_of, unwrap
from paradvisor.train.recompute import apply_checkpointing
from paradvisor.train.stages import stage_blocks
from paradvisor.train.tp_plans import apply_tp

ORDER = ("tp", "ep", "recompute", "dp")


class Engine(Protocol):
    """One concern of the plan applied to a model: returns the model (or its wrapper) to go on with."""

    role: ClassVar[str]  # one of ORDER

    def apply(self, model, dims: ParallelDims, mesh, plan): ...


def apply_engines(model, dims: ParallelDims, mesh, plan, engines: list) -> object:
    """`engines` applied to `model` in ORDER (whatever order the list has), at most one per role."""
    roles = [e.role for e in engines]
    if len(set(roles)) != len(roles) or not set(roles) <= set(ORDER):
        raise ValueError(f"engines {roles}: at most one of each of {ORDER}")
    for role in ORDER:
        for e in engines:
            if e.role == role:
                model = e.apply(model, dims, mesh, plan)
    return model


@dataclass
class TensorParallel:
    """TP (+SP) over the mesh's tp dimension. `root`: the whole model when `model` is a pipeline stage (the
    family's plan reads its config); `blocks`: the blocks of `model` to parallelize."""

    family: str
    root: object = None
    blocks: Callable = blocks_of
    role: ClassVar[str] = "tp"

    def apply(self, model, dims, mesh, plan):
        if dims.tp_enabled:
            sp = bool(plan.sequence_parallel) and not dims.cp_enabled
            root = self.root if self.root is not None else model
            apply_tp(root, self.family, self.blocks(model), mesh["tp"], sequence_parallel=sp)
        return model


@dataclass
class ExpertParallel:
    """EP over the mesh's ep dimension; keeps the expert modules and the expert-DP mesh for the
    data-parallel engine (ExpertFullyShard) and the gradient reduction (`reduce`)."""

    family: str
    device: torch.device
    experts: list = field(default_factory=list)
    edp_mesh: object = None
    role: ClassVar[str] = "ep"

    def apply(self, model, dims, mesh, plan):
        self.edp_mesh, self.experts = apply_ep(
            unwrap(model), mesh[dims.dp_dim], mesh["ep"], mesh["tp"], self.family
        )
        return model

    def reduce(self, world: int):
        return lambda params: reduce_grads(params, world, self.edp_mesh)


@dataclass
class Recompute:
    """Activation checkpointing per block of `container` (a pipeline stage; default: the model)."""

    family: str
    container: object = None
    role: ClassVar[str] = "recompute"

    def apply(self, model, dims, mesh, plan):
        apply_checkpointing(model, self.family, plan.checkpointing, container=self.container)
        return model


@dataclass
class FullyShard:
    """FSDP2 on `dp_mesh` (1-D: FSDP; 2-D replicate x shard: HSDP), per block then the root, with the
    plan's 16-bit parameters and fp32 reduction; `offload`: the plan's CPU offload. `stage`: a pipeline
    stage, sharded as it is (its own blocks, no mixed-precision policy)."""

    dp_mesh: object
    offload: bool = False
    stage: bool = False
    role: ClassVar[str] = "dp"

    def apply(self, model, dims, mesh, plan):
        if self.stage:
            apply_fsdp(model, self.dp_mesh, blocks=stage_blocks)
        else:
            apply_fsdp(model, self.dp_mesh, plan.precision, offload=self.offload and plan.offload != "none")
        return model


@dataclass
class ExpertFullyShard:
    """EP x FSDP: each experts module over its expert-DP ranks, the blocks and the root over all ranks."""

    ep: ExpertParallel
    role: ClassVar[str] = "dp"

    def apply(self, model, dims, mesh, plan):
        everyone = flat_mesh(mesh, (dims.dp_dim, "ep"), "dp")
        apply_ep_fsdp(model, self.ep.experts, self.ep.edp_mesh, everyone, dims.world, plan.precision)
        return model


@dataclass
class Replicate:
    """torch DDP over `group` (None: every rank)."""

    group: object = None
    device: torch.device | None = None
    role: ClassVar[str] = "dp"

    def apply(self, model, dims, mesh, plan):
        from torch.nn.parallel import DistributedDataParallel as DDP

        cuda = self.device is not None and self.device.type == "cuda"
        kw = {"process_group": self.group} if self.group is not None else {}
        return DDP(
            model, gradient_as_bucket_view=True, device_ids=[self.device.index] if cuda else None, **kw
        )


@dataclass
class AverageGrads:
    """Data parallelism for models DDP cannot wrap (TP'd DTensor parameters): the model as it is, its
    gradients averaged over `group` of `size` ranks after backward (`reduce`, the runner calls it)."""

    group: object
    size: int
    role: ClassVar[str] = "dp"

    def apply(self, model, dims, mesh, plan):
        return model

    def reduce(self, params) -> None:
        average_grads(params, self.group, self.size)


@dataclass
class Zero:
    """DeepSpeed ZeRO-1/2/3 over every rank: returns DeepSpeed's engine (a module around the model); the
    optimizer and the config are kept for the runner (train/parallelize.DeepSpeedEngine)."""

    train: object
    device: torch.device
    opt: object = None
    config: dict = field(default_factory=dict)
    role: ClassVar[str] = "dp"

    def apply(self, model, dims, mesh, plan):
        import deepspeed
        import deepspeed.ops

        if self.device.type == "cpu":
            # DeepSpeed would JIT-compile a shared-memory all-reduce op for CPU runs (a minute, and a
            # compiler); gloo's collectives are enough for what runs on CPU here.
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        # The trainer's own torch AdamW on every device: DeepSpeed's FusedAdam would JIT-compile a CUDA op
        # first (nvcc, minutes; and DeepSpeed 0.19 cannot parse arch lists such as "9.0a"), on CPU a C++ one.
        t = self.train
        self.config = deepspeed_config(
            plan,
            lr=t.lr,
            weight_decay=t.weight_decay,
            grad_clip=t.grad_clip,
            world=dims.world,
            include_optimizer=False,
        )
        client_opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        engine, self.opt, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=self.config, optimizer=client_opt
        )
        return engine


@dataclass
class Choice:
    """The engines of a plan, and how the runner (train/parallelize.TorchEngine) trains the result."""

    engines: list
    kind: str  # what build_engine returns (the loop, checkpoints and metrics read it)
    runner: str = ""  # TorchEngine's kind where it differs (CP)
    autocast: bool = True  # False under FSDP: its mixed-precision policy casts
    grad_reduce: Callable | None = None  # gradients reduced after backward (TP x DDP, EP)
    context: object = None  # CP: the batch's sequence split (train/context.py)


def mesh_keep(dims: ParallelDims) -> tuple[str, ...] | None:
    """The size-1 dimensions a plan's engines still slice from the mesh; None: no mesh (ZeRO: DeepSpeed
    makes its own groups)."""
    if dims.cp_enabled:
        return (dims.dp_dim, "cp", "tp")
    if dims.ep_enabled:
        return (dims.dp_dim, "ep", "tp")
    if dims.zero_enabled:
        return None
    if dims.sharding == "hsdp" and not dims.tp_enabled:  # a 2-D (replicate, shard) mesh, even where one is 1
        return ("dp_replicate", "dp_shard")
    if dims.sharding == "fsdp" and not dims.tp_enabled:  # one rank too: the plan runs as ranked
        return (dims.dp_dim,)
    return ()


def engines_for(family: str, plan, train, device, dims: ParallelDims, mesh, coords) -> Choice:
    """The engines of a plan that is not a pipeline, on its mesh (train/mesh.build_mesh, `mesh_keep`)."""
    rec = Recompute(family)
    if dims.cp_enabled:
        return _context_parallel(family, plan, device, dims, mesh, coords)
    if dims.ep_enabled:
        ep = ExpertParallel(family, device)
        if plan.sharding == "fsdp":
            return Choice([ep, rec, ExpertFullyShard(ep)], "ep+fsdp", autocast=False)
        return Choice([ep, rec], "ep", grad_reduce=ep.reduce(dims.world))
    if dims.zero_enabled:
        return Choice([rec, Zero(train, device)], "deepspeed")
    if dims.tp_enabled:
        tp, dp_mesh = TensorParallel(family), sub_mesh(mesh, "dp")
        if dp_mesh is None:
            return Choice([tp, rec], "tp")
        if plan.sharding == "fsdp":
            return Choice([tp, rec, FullyShard(dp_mesh)], "tp+fsdp", autocast=False)
        avg = AverageGrads(dp_mesh.get_group(), dims.dp)
        return Choice([tp, rec, avg], "tp+ddp", grad_reduce=avg.reduce)
    if dims.fsdp_enabled:  # the mesh is the data-parallel dimensions: FSDP's, or HSDP's 2-D one
        return Choice([rec, FullyShard(mesh, offload=True)], "fsdp", autocast=False)
    if dims.world > 1:
        return Choice([rec, Replicate(sub_mesh(mesh, "dp").get_group(), device)], "ddp")
    return Choice([rec], "single")


def _context_parallel(family: str, plan, device, dims: ParallelDims, mesh, coords) -> Choice:
    """CP (x TP) x DDP/FSDP, torchtitan's layout: TP on tp, the sequence split over cp (train/context.py),
    the gradients averaged over the flattened dp x cp ranks — DDP or FSDP2 over them (every cp rank of a
    replica holds the whole model and the same samples, different tokens)."""
    ring = ring_applies(families.get(family), device.type)
    shard = ContextShard(mesh["cp"].get_group(), dims.cp, coords.cp_rank, mesh["cp"] if ring else None)
    tp = [TensorParallel(family)] if dims.tp_enabled else []
    rec = Recompute(family)
    dp_cp = flat_mesh(mesh, (dims.dp_dim, "cp"), "dp_cp")
    if plan.sharding == "fsdp":
        return Choice([*tp, rec, FullyShard(dp_cp)], "cp+fsdp", autocast=False, context=shard)
    if not dims.tp_enabled:
        return Choice([rec, Replicate(dp_cp.get_group(), device)], "cp+ddp", runner="ddp", context=shard)
    avg = AverageGrads(dp_cp.get_group(), dims.dp * dims.cp)
    return Choice([*tp, rec, avg], "cp+tp", runner="tp+ddp", grad_reduce=avg.reduce, context=shard)


def inner_engines(family: str, plan, device, mesh) -> Choice:
    """DiLoCo's inner data parallelism over one node's mesh (train/mesh.node_mesh): DDP, or FSDP."""
    rec = Recompute(family)
    if mesh.size() > 1 and plan.sharding == "fsdp":
        return Choice([rec, FullyShard(mesh)], "fsdp", autocast=False)
    if mesh.size() > 1:
        return Choice([rec, Replicate(mesh.get_group(), device)], "ddp")
    return Choice([rec], "single")
