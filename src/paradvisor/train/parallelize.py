"""Apply a Plan to a model: one small function per concern, torchtitan-style.

  DDP                 torch.nn.parallel.DistributedDataParallel
  FSDP / HSDP         FSDP2 `fully_shard` per block, then the root (HSDP: 2-D mesh replicate x shard)
  TP (x FSDP)         `parallelize_module` with column/row-wise plans per block on a (dp, tp) mesh
  PP                  `torch.distributed.pipelining` stages over the blocks, GPipe or 1F1B
  ZeRO-1/2/3          DeepSpeed engine (optional CPU offload)
  checkpointing       activation checkpoint wrappers per block (selective: attention only)

Each engine offers the same few calls to the loop: forward_backward, step, set_lr, memory_groups.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from paradvisor.errors import InputError
from paradvisor.train.metrics import optimizer_state_tensors
from paradvisor.train.models import _unwrap, blocks_of, logits_of, loss_of

TP_PLANS = {
    # family: (block -> {submodule: "col" | "row"})
    "mingpt": {"attn.q": "col", "attn.k": "col", "attn.v": "col", "attn.proj": "row", "mlp.fc": "col",
               "mlp.proj": "row"},
    "bert": {"attention.self.query": "col", "attention.self.key": "col", "attention.self.value": "col",
             "attention.output.dense": "row", "intermediate.dense": "col", "output.dense": "row"},
    "albert": {"albert_layers.0.attention.query": "col", "albert_layers.0.attention.key": "col",
               "albert_layers.0.attention.value": "col", "albert_layers.0.attention.dense": "row",
               "albert_layers.0.ffn": "col", "albert_layers.0.ffn_output": "row"},
    "llama": {"self_attn.q_proj": "col", "self_attn.k_proj": "col", "self_attn.v_proj": "col",
              "self_attn.o_proj": "row", "mlp.gate_proj": "col", "mlp.up_proj": "col", "mlp.down_proj": "row"},
}
TP_PLANS["mistral"] = TP_PLANS["llama"]


def supported(plan, family: str) -> str | None:
    """Why this launcher cannot run `plan` for `family` (None if it can)."""
    if plan.sequence_parallel:
        return "sequence parallelism is planned but not launched by this version: set plan.sequence_parallel = false"
    if plan.tp > 1 and family not in TP_PLANS:
        return f"tensor parallelism has no column/row plan for {family!r} models (have: {', '.join(TP_PLANS)})"
    if plan.tp > 1 and plan.dp > 1 and plan.sharding != "fsdp":
        return "TP combined with data parallelism is launched as TP x FSDP on a 2-D mesh: set plan.sharding = \"fsdp\""
    if plan.pp > 1 and family != "mingpt":
        return "pipeline parallelism is launched for the minGPT-style model (gpt-mini) only"
    if plan.pp > 1 and (plan.dp > 1 or plan.tp > 1):
        return "pipeline parallelism is launched alone (dp = tp = 1)"
    if plan.sharding.startswith("zero") and (plan.tp > 1 or plan.pp > 1):
        return "DeepSpeed ZeRO is launched with data parallelism only (tp = pp = 1)"
    if plan.diloco and (plan.tp > 1 or plan.pp > 1 or plan.sharding not in ("none",)):
        return "DiLoCo is launched with plain data parallelism inside each node (sharding = \"none\")"
    return None


def apply_checkpointing(model, family: str, mode: str) -> None:
    if mode == "none":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    hf = _unwrap(model)
    if family in ("bert", "albert", "llama", "mistral", "gpt2"):
        if getattr(hf, "supports_gradient_checkpointing", False):
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:  # e.g. ALBERT: wrap each block ourselves (full recompute of the block)
            from paradvisor.train.models import block_list

            blocks = block_list(hf)
            for i in range(len(blocks)):
                blocks[i] = checkpoint_wrapper(blocks[i])
        return

    if family == "mingpt":
        if mode == "full":
            model.blocks = nn.ModuleList(checkpoint_wrapper(b) for b in model.blocks)
        else:  # selective: recompute the attention only
            for blk in model.blocks:
                blk.attn = checkpoint_wrapper(blk.attn)


def _tp_style(kind: str):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return ColwiseParallel() if kind == "col" else RowwiseParallel()


def apply_tp(model, family: str, mesh) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    plan = {k: _tp_style(v) for k, v in TP_PLANS[family].items()}
    for blk in blocks_of(model):
        parallelize_module(blk, mesh, plan)


def apply_fsdp(model, mesh=None, precision: str = "fp32", offload: bool = False, reshard: bool = True) -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kw = {"mesh": mesh, "reshard_after_forward": reshard}
    if precision in ("bf16", "fp16"):
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, "bfloat16" if precision == "bf16" else "float16"),
                                               reduce_dtype=torch.float32)
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for blk in blocks_of(model):
        fully_shard(blk, **kw)
    fully_shard(model, **kw)


def _autocast(device: torch.device, precision: str):
    if precision in ("bf16", "fp16"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
    return contextlib.nullcontext()


class TorchEngine:
    """Plain, DDP, FSDP2, TP and TP x FSDP models under one torch AdamW."""

    def __init__(self, model, plan, train, device, *, kind: str, autocast: bool):
        self.model, self.plan, self.device, self.kind = model, plan, device, kind
        self.autocast = autocast and plan.precision in ("bf16", "fp16")
        foreach = False if plan.tp > 1 else None
        self.opt = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay, foreach=foreach)
        self.clip = train.grad_clip
        self.scaler = torch.amp.GradScaler("cuda") if plan.precision == "fp16" and device.type == "cuda" else None
        self.last_groups = None

    def _sync_ctx(self, last: bool):
        if self.kind == "ddp" and not last:
            return self.model.no_sync()
        if self.kind == "fsdp" and hasattr(self.model, "set_requires_gradient_sync"):
            self.model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def forward_backward(self, inputs, targets, *, last: bool, scale: float) -> float:
        with self._sync_ctx(last):
            with _autocast(self.device, self.plan.precision) if self.autocast else contextlib.nullcontext():
                loss = loss_of(logits_of(self.model, inputs), targets)
            scaled = loss * scale
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return float(loss.detach())

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self) -> None:
        if self.scaler:
            self.scaler.unscale_(self.opt)
        if self.clip > 0:
            params = [p for p in self.model.parameters() if p.grad is not None]
            if self.plan.tp == 1:  # TP mixes sharded and replicated tensors, which clip_grad_norm_ rejects
                torch.nn.utils.clip_grad_norm_(params, self.clip)
        self.last_groups = self.memory_groups()
        (self.scaler.step(self.opt) if self.scaler else self.opt.step())
        if self.scaler:
            self.scaler.update()
        self.last_groups = self.memory_groups()  # after the step the optimizer states exist
        self.opt.zero_grad(set_to_none=True)

    def memory_groups(self) -> dict:
        params = list(self.model.parameters())
        return {"params": params, "grads": [p.grad for p in params if p.grad is not None],
                "optimizer": optimizer_state_tensors(self.opt)}


class DeepSpeedEngine:
    def __init__(self, model, plan, train, device, world: int):
        import deepspeed
        import deepspeed.ops

        if device.type == "cpu":
            # DeepSpeed would JIT-compile a shared-memory all-reduce op for CPU runs (a minute, and a
            # compiler); gloo's collectives are enough for what runs on CPU here.
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

        from paradvisor.launch.dsconfig import deepspeed_config

        on_cpu = device.type == "cpu"
        cfg = deepspeed_config(plan, lr=train.lr, weight_decay=train.weight_decay, grad_clip=train.grad_clip,
                               world=world, include_optimizer=not on_cpu)
        self.config = cfg
        client_opt = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay) if on_cpu else None
        self.engine, self.opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg,
                                                           optimizer=client_opt)
        self.model = self.engine
        self.last_groups = None
        self.step_grads_bytes = None
        self._watch_step()

    def _watch_step(self) -> None:
        """Measure the gradients alive inside the optimizer step (DeepSpeed's fp32 partition exists only then)."""
        from paradvisor.train.metrics import count_bytes, deepspeed_state_groups

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
        self.engine.backward(loss * scale)
        if last:
            self.last_groups = self.memory_groups()
        self.engine.step()  # steps the optimizer only at the accumulation boundary
        return float(loss.detach())

    def set_lr(self, lr: float) -> None:
        for g in self.engine.optimizer.param_groups:
            g["lr"] = lr

    def step(self) -> None:
        groups = self.memory_groups()
        if self.last_groups is not None:
            groups["grads"] = self.last_groups["grads"] + groups["grads"]
        self.last_groups = groups

    def memory_groups(self) -> dict:
        from paradvisor.train.metrics import deepspeed_state_groups

        g = deepspeed_state_groups(self.engine)
        return {"params": g["params"], "grads": g["grads"], "optimizer": g["optimizer"]}


class PipelineEngine:
    """minGPT split into `pp` stages over its blocks; the whole step is one schedule call."""

    def __init__(self, model, plan, train, device, rank: int, world: int):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        n = len(model.blocks)
        per = n // world
        first, last = rank == 0, rank == world - 1
        stage_mod = _Stage(model, rank * per, (rank + 1) * per, first, last)
        self.stage_mod, self.first, self.last = stage_mod, first, last
        self.stage = PipelineStage(stage_mod, rank, world, device)
        cls = ScheduleGPipe if plan.pp_schedule == "gpipe" else Schedule1F1B
        self.schedule = cls(self.stage, n_microbatches=plan.grad_accum, loss_fn=lambda out, y: loss_of(out, y))
        self.opt = torch.optim.AdamW(stage_mod.parameters(), lr=train.lr, weight_decay=train.weight_decay)
        self.model = stage_mod
        self.last_groups = None

    def pipeline_step(self, inputs, targets) -> float | None:
        losses: list = []
        x = inputs["input_ids"]
        if self.first and self.last:
            raise InputError("a pipeline needs at least 2 stages")
        if self.first:
            self.schedule.step(x)
        elif self.last:
            self.schedule.step(target=targets, losses=losses)
        else:
            self.schedule.step()
        return float(torch.stack(losses).mean()) if losses else None

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            g["lr"] = lr

    def step(self) -> None:
        self.opt.step()
        self.last_groups = self.memory_groups()
        self.opt.zero_grad(set_to_none=True)

    def memory_groups(self) -> dict:
        params = list(self.stage_mod.parameters())
        return {"params": params, "grads": [p.grad for p in params if p.grad is not None],
                "optimizer": optimizer_state_tensors(self.opt)}


class _Stage(nn.Module):
    def __init__(self, m, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.blocks = nn.ModuleList(m.blocks[lo:hi])
        if first:
            self.wte, self.wpe = m.wte, m.wpe
        if last:
            self.ln_f, self.lm_head = m.ln_f, m.lm_head

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x)) if self.last else x


def build_engine(model, family: str, plan, train, device, rank: int, world: int, inner_group=None):
    """Wrap `model` as the Plan says; returns (engine, kind). Order: TP, checkpointing, FSDP."""
    model.to(device)
    if plan.tp == 1:
        apply_checkpointing(model, family, plan.checkpointing)
    if plan.pp > 1:
        return PipelineEngine(model, plan, train, device, rank, world), "pp"
    if plan.sharding.startswith("zero"):
        return DeepSpeedEngine(model, plan, train, device, world), "deepspeed"
    from torch.distributed.device_mesh import init_device_mesh

    dev = device.type
    if plan.tp > 1:
        if plan.dp > 1:
            mesh = init_device_mesh(dev, (plan.dp, plan.tp), mesh_dim_names=("dp", "tp"))
            apply_tp(model, family, mesh["tp"])
            apply_checkpointing(model, family, plan.checkpointing)
            apply_fsdp(model, mesh["dp"], plan.precision)
            return TorchEngine(model, plan, train, device, kind="fsdp", autocast=False), "tp+fsdp"
        mesh = init_device_mesh(dev, (plan.tp,))
        apply_tp(model, family, mesh)
        apply_checkpointing(model, family, plan.checkpointing)
        return TorchEngine(model, plan, train, device, kind="tp", autocast=True), "tp"
    if plan.sharding in ("fsdp", "hsdp") and world > 1:
        mesh = None
        if plan.sharding == "hsdp":
            shard = int(plan.nodes[0].gpus) if plan.nodes else max(1, world // 2)
            mesh = init_device_mesh(dev, (world // shard, shard), mesh_dim_names=("replicate", "shard"))
        apply_fsdp(model, mesh, plan.precision, offload=plan.offload != "none")
        return TorchEngine(model, plan, train, device, kind="fsdp", autocast=False), "fsdp"
    group_size = world if inner_group is None else torch.distributed.get_world_size(inner_group)
    if group_size > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, process_group=inner_group, gradient_as_bucket_view=True,
                  device_ids=[device.index] if device.type == "cuda" else None)
        return TorchEngine(ddp, plan, train, device, kind="ddp", autocast=True), "ddp"
    return TorchEngine(model, plan, train, device, kind="single", autocast=True), "single"
