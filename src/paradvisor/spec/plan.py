"""The Plan: one type from the planner to the preset file, the launcher, the trainer and the monitor.

A Plan says how to train (the parallel layout and its settings); a Workload says what (model,
sequence length, batch, steps). Both are plain frozen dataclasses with dict round-trips so that
they can be written to TOML presets and read back by the launcher and the training entry point.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from paradvisor.record import record

SHARDINGS = ("none", "zero1", "zero2", "zero3", "fsdp", "hsdp")
CHECKPOINTING = ("none", "selective", "full")
PRECISIONS = ("fp32", "fp16", "bf16", "fp8")
OFFLOADS = ("none", "optimizer", "optimizer+params")
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved1f1b")
PP_SPLITS = ("even", "balanced")


@record(frozen=True)
class NodeAllocation:
    """What one node does in a heterogeneous or geo-distributed plan (001 data share, 003 local steps)."""

    node: str
    gpus: int
    tflops: float  # average per-GPU peak of this node for the plan's precision
    relative_speed: float  # normalised by the slowest node
    batch_per_gpu: int  # micro-batch each GPU of this node runs
    data_share: float  # fraction of each global step's samples this node processes
    local_steps: int | None = None  # DiLoCo: inner steps between outer syncs

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["local_steps"] is None:
            del d["local_steps"]
        return d


@dataclass(frozen=True)
class Plan:
    """One way to train the model on the cluster: the parallel layout and its settings (what a preset's [plan]
    table holds and the launcher runs)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    sharding: str = "none"  # none (DDP replicas) | zero1 | zero2 | zero3 | fsdp | hsdp
    micro_batch: int = 1  # per GPU, per forward/backward
    grad_accum: int = 1  # micro-steps per optimizer step (= pipeline micro-batches when pp > 1)
    checkpointing: str = "none"
    precision: str = "bf16"
    offload: str = "none"
    sequence_parallel: bool = False
    pp_schedule: str = "1f1b"
    diloco: bool = False
    local_steps: int | None = None  # DiLoCo inner steps (base; per node in `nodes`)
    split_by_speed: bool = False  # heterogeneous: per-GPU batch in proportion to speed
    rank_batches: tuple[int, ...] = ()  # with split_by_speed: micro-batch of each rank, in rank order
    nodes: tuple[NodeAllocation, ...] = field(default_factory=tuple)
    ep: int = 1  # expert parallelism (MoE): experts split over ep ranks of each data-parallel group
    cp: int = 1  # context parallelism: each sequence split over cp ranks (load-balanced causal chunks)
    pp_virtual_stages: int = 1  # interleaved 1F1B: model chunks per pipeline rank (plan/stages.py)
    pp_split: str = "even"  # even: L/pp blocks per stage; balanced: embedding and head count as a block each

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def engine(self) -> str:
        """Which engine runs it: DeepSpeed for ZeRO stages, torch.distributed otherwise."""
        return "deepspeed" if self.sharding.startswith("zero") else "torch"

    @property
    def round_steps(self) -> int | None:
        """A DiLoCo plan's steps per outer round, what train.steps counts: local_steps, else every node's own
        when they agree (a node may run more or fewer by speed); None when it is not given or is ambiguous."""
        per_node = {n.local_steps for n in self.nodes}
        if self.local_steps:
            return self.local_steps
        return next(iter(per_node)) if len(per_node) == 1 and None not in per_node else None

    @property
    def zero_stage(self) -> int:
        return {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "hsdp": 3}[self.sharding]

    def label(self) -> str:
        """Short human name, e.g. "TP4+SP x PP2(1f1b,m=16) x FSDP4 +offload(opt)", "EP8 x FSDPx32"."""
        parts = []
        if self.diloco:
            parts.append(f"DiLoCo(H={self.local_steps})")
        shard = {
            "none": "DDP" if self.dp > 1 else "",
            "zero1": "ZeRO-1",
            "zero2": "ZeRO-2",
            "zero3": "ZeRO-3",
            "fsdp": "FSDP",
            "hsdp": "HSDP",
        }[self.sharding]
        if self.tp > 1:
            parts.append(f"TP{self.tp}" + ("+SP" if self.sequence_parallel else ""))
        if self.pp > 1:
            sched = self.pp_schedule + (f"x{self.pp_virtual_stages}" if self.pp_virtual_stages > 1 else "")
            split = ",balanced" if self.pp_split == "balanced" else ""
            parts.append(f"PP{self.pp}({sched},m={self.grad_accum}{split})")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.dp > 1:
            # "FSDP4", "DDP4" beside TP/PP/CP, else "FSDPx32"; a ZeRO stage's digit is never run into the
            # degree ("ZeRO-3x4", not "ZeRO-34")
            joined = self.tp > 1 or self.pp > 1 or self.cp > 1
            parts.append(f"{shard}{'' if joined and not shard[-1].isdigit() else 'x'}{self.dp}")
        elif self.cp > 1 and self.sharding != "none":  # dp 1: the states are sharded over the cp ranks
            parts.append(shard)
        if not parts:
            parts.append(f"{shard} (1 GPU)" if shard else "single GPU")
        flags = []
        if self.offload != "none":
            flags.append("+offload(" + self.offload.replace("optimizer", "opt").replace("+", ",") + ")")
        if self.split_by_speed:
            flags.append("+split-by-speed")
        return " ".join([" x ".join(parts), *flags])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["nodes"] = [n.to_dict() for n in self.nodes]
        d["rank_batches"] = list(self.rank_batches)
        if d["local_steps"] is None:
            del d["local_steps"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known and k not in ("nodes", "rank_batches")}
        nodes = tuple(n if isinstance(n, NodeAllocation) else NodeAllocation(**n) for n in d.get("nodes", ()))
        return cls(**kw, nodes=nodes, rank_batches=tuple(d.get("rank_batches", ())))

    def with_(self, **changes) -> Plan:
        return replace(self, **changes)


_DEFAULTS = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(Plan)}


def new_plan(**given) -> Plan:
    """Plan(**given), made without the frozen dataclass's __init__ (one object.__setattr__ per field: a third of
    the time the search spends making its thousands of candidates); the same object, field for field. For the
    search's own plans (`given` names fields only)."""
    plan = object.__new__(Plan)
    plan.__dict__.update(_DEFAULTS, **given)
    return plan


def changed_plan(plan: Plan, **changes) -> Plan:
    """dataclasses.replace(plan, **changes) the way new_plan makes a plan (a rule's `set`, for each plan it
    fires on); `changes` names fields only."""
    new = object.__new__(Plan)
    new.__dict__.update(plan.__dict__, **changes)
    return new


@record(frozen=True)
class Workload:
    model: str
    seq_len: int = 512
    global_batch: int = 32
    precision: str = "auto"  # auto | fp32 | fp16 | bf16 | fp8
    optimizer: str = "adamw"
    # the attention implementation the family's code runs: sdpa (SDPA / flash: no s^2 activations) | eager
    # (softmax(QK^T) kept); "auto" (the family's own pick) is resolved before a Workload is built
    attention: str = "sdpa"

    def to_dict(self) -> dict:
        return asdict(self)
