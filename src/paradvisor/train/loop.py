"""The training loops: synchronous steps (every engine) and DiLoCo's inner/outer rounds."""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import contextlib
import math
import time

import torch
import torch.distributed as dist

from paradvisor.rundir.phases import announce
from paradvisor.rundir.records import StepRecord
from paradvisor.spec.faults import from_env as fault_drill
from paradvisor.spec.mesh import ParallelDims
from paradvisor.spec.plan import NodeAllocation
from paradvisor.train.data import RankStream
from paradvisor.train.evaluate import eval_count, evaluate
from paradvisor.train.mesh import node_mesh
from paradvisor.train.metrics import ActivationMeter, count_bytes, cuda_peak

MEASURE_STEP = 2  # activation bytes are measured on this step (the first is a warm-up)


def lr_at(step: int, total: int, base: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the base rate."""
    if warmup and step <= warmup:
        return base * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def data_layout(plan, rank: int, world: int) -> tuple[int, list[int]]:
    """(this rank's data-parallel index, samples each data rank takes per micro-step). Megatron order: tp
    fastest, then dp, then pp; TP ranks and pipeline stages of one replica read the same samples. A pipeline
    takes its whole per-replica batch at once (the schedule splits it into grad_accum micro-batches)."""
    lay = ParallelDims.of(plan, world).coords(rank)
    if plan.pp > 1:
        return lay.dp_rank, [plan.micro_batch * plan.grad_accum] * lay.dp
    batches = list(plan.rank_batches) if plan.rank_batches else [plan.micro_batch] * lay.dp
    return lay.dp_rank, batches


def global_loss(loss: float | None, plan, rank: int, world: int, batches: list[int], data_rank: int) -> float:
    """The step's loss over the whole global batch: every data rank's loss weighted by its samples, counted
    once per replica (TP ranks hold copies; in a pipeline only the last stage has it). One scalar
    all-reduce per logged step."""
    if world == 1 or not dist.is_initialized():
        return float(loss)
    lay = ParallelDims.of(plan, world).coords(rank)
    mine = 0.0
    if loss is not None and lay.holds_loss:
        mine = loss * batches[data_rank] / (lay.tp * lay.cp)  # TP copies; CP: the mean of the ranks' halves
    t = torch.tensor([mine], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0]) / sum(batches)


def memory_record(engine) -> dict:
    groups = engine.last_groups or engine.memory_groups()
    b = count_bytes(groups)
    rec = {
        "mem_params_bytes": b["params"],
        "mem_grads_bytes": b["grads"],
        "mem_optimizer_bytes": b["optimizer"],
        "mem_model_state_bytes": b["params"] + b["grads"] + b["optimizer"],
    }
    if getattr(engine, "step_grads_bytes", None) is not None:
        rec["mem_step_grads_bytes"] = engine.step_grads_bytes
    peak = cuda_peak()
    if peak is not None:
        rec["cuda_max_allocated_bytes"], rec["cuda_max_reserved_bytes"] = peak
    return rec


def train_sync(
    preset, engine, kind: str, task, device, rank: int, world: int, writer, *, progress=None, ckpt=None
) -> None:
    """Steps 1..train.steps (from the checkpoint's step + 1 on a resume); `ckpt` (train/checkpoint.py) saves
    after the steps it is due and stops the loop on a graceful stop."""
    plan, t = preset.plan, preset.train
    data_rank, batches = data_layout(plan, rank, world)
    stream = RankStream(len(task.dataset), batches, data_rank, t.seed)
    my_batch = batches[data_rank]
    scale = my_batch * len(batches) / sum(batches)  # uneven batches: weight each rank's loss by its samples
    per_step = my_batch * (1 if kind == "pp" else plan.grad_accum)
    fault = fault_drill()
    start = ckpt.resume(stream) if ckpt else 0
    slowest = 0.0  # the slowest step so far: what an eval's phase record expects a batch to take
    for step in range(start + 1, t.steps + 1):
        if fault:
            fault.at(rank, step)
        t0 = time.perf_counter()
        lr = lr_at(step, t.steps, t.lr, t.warmup_steps)
        engine.set_lr(lr)
        meter = ActivationMeter(engine.model.parameters()) if step == min(MEASURE_STEP, t.steps) else None
        if kind == "pp":
            inputs, targets = task.batch(stream.next(), device)
            with meter or contextlib.nullcontext():
                loss = engine.pipeline_step(inputs, targets)
        else:
            loss = 0.0
            for micro in range(plan.grad_accum):
                inputs, targets = task.batch(stream.next(), device)
                with (
                    meter if micro == 0 else None
                ) or contextlib.nullcontext():  # one micro-batch's activations
                    loss += (
                        engine.forward_backward(
                            inputs, targets, last=micro == plan.grad_accum - 1, scale=scale / plan.grad_accum
                        )
                        / plan.grad_accum
                    )
        engine.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        slowest = max(slowest, dt := time.perf_counter() - t0)
        if step % t.log_every == 0 or step == t.steps or meter:
            local_loss = loss
            loss = global_loss(loss, plan, rank, world, batches, data_rank)
            rec = {
                "kind": "step",
                "step": step,
                "loss": loss,
                "local_loss": local_loss,
                "lr": lr,
                "step_time_s": dt,
                "samples": per_step,
                "samples_per_s": per_step / dt,
                "tokens_per_s": per_step * task.seq_len / dt if task.kind != "image" else None,
                "global_samples_per_s": preset.workload.global_batch / dt,
                "sync_wait_s": 0.0,
                "world_size": world,
                "strategy": kind,
                "grad_norm": getattr(engine, "grad_norm", None),
                "samples_consumed": stream.samples_consumed,
                "epoch": stream.epoch,
            }
            rec.update(memory_record(engine))
            if meter:
                rec["activation_bytes"] = meter.bytes
                rec["act_working_bytes"] = meter.working_bytes
                rec["act_gathered_bytes"] = meter.gathered_bytes
            writer.write(StepRecord.of(**rec))
        if t.eval_every and step % t.eval_every == 0 and step != t.steps:
            run_eval(engine, kind, task, preset, step, device, rank, world, writer, step_s=slowest)
        if progress:
            progress(step)
        if ckpt and ckpt.after_step(step, stream.samples_consumed):
            break
    if ckpt:
        ckpt.close()
    # the final eval: model/'s loss
    run_eval(engine, kind, task, preset, t.steps, device, rank, world, writer, step_s=slowest)


def run_eval(
    engine, kind: str, task, preset, step: int, device, rank: int, world: int, writer, step_s: float = 0.0
) -> dict | None:
    """One eval over the held-out part (train/evaluate.py), recorded as a kind = "eval" record; announced
    (rundir/phases.py) as a global batch's forward per `step_s`, the slowest training step."""
    t0 = time.perf_counter()
    if task.eval_dataset is not None:
        n = eval_count(task.eval_dataset, preset.train.eval_samples)
        announce(writer, "eval", math.ceil(n / max(1, preset.workload.global_batch)) * step_s, step)
    data = data_layout(preset.plan, rank, world)
    res = evaluate(engine, kind, task, preset.plan, rank, world, device, data, preset.train.eval_samples)
    if res is None:
        return None
    writer.write({"kind": "eval", "step": step, **res, "eval_time_s": time.perf_counter() - t0})
    return res


def node_of_rank(plan, rank: int) -> int:
    edge = 0
    for i, n in enumerate(plan.nodes):
        edge += n.gpus
        if rank < edge:
            return i
    return len(plan.nodes) - 1


def _full(p):
    """A parameter's whole value (FSDP inside a node holds shards: all-gathered over the node)."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def _assign(p, value) -> None:
    """Write the whole `value` into a parameter, or into this rank's shard of it."""
    if hasattr(p, "full_tensor"):
        from torch.distributed.tensor import distribute_tensor

        local = distribute_tensor(
            value.to(p.device, p.dtype), p.device_mesh, p.placements, src_data_rank=None
        )
        p.to_local().copy_(local.to_local())
    else:
        p.copy_(value.to(p.device, p.dtype))


def train_diloco(preset, build_inner, task, device, rank: int, world: int, writer, make_ckpt=None) -> None:
    """DiLoCo (Douillard et al. 2023): inner AdamW for H_i local steps on each node, then the outer
    Nesterov SGD step on the averaged pseudo-gradients (start - current). H_i per node from the plan
    (003 technique C). The time a rank waits for the others at each outer sync is recorded."""
    plan, t = preset.plan, preset.train
    nodes = _diloco_nodes(plan, world)
    my_node = node_of_rank(plan.with_(nodes=nodes), rank)
    h = nodes[my_node].local_steps or plan.local_steps or 10
    engine, kind = build_inner(node_mesh([n.gpus for n in nodes], rank, device.type))
    params = [p for p in engine.model.parameters()]
    outer_params = [_full(p).detach().clone().cpu().float() for p in params]
    outer_opt = torch.optim.SGD(outer_params, lr=t.outer_lr, momentum=t.outer_momentum, nesterov=True)
    batches = (
        [n.batch_per_gpu for n in nodes for _ in range(n.gpus)] if plan.nodes else [plan.micro_batch] * world
    )
    stream = RankStream(len(task.dataset), batches, rank, t.seed)
    base_h = plan.local_steps or h
    rounds = max(1, math.ceil(t.steps / base_h))
    fault = fault_drill()
    ckpt = make_ckpt(engine, kind) if make_ckpt else None
    done_rounds = 0
    if ckpt:  # the outer state and each node's inner optimizer are saved at round ends
        ckpt.optim_key = f"optim-node{my_node}"
        ckpt.extra_state = lambda: _outer_state(outer_params, outer_opt)
        done_rounds = ckpt.resume() // base_h
        stream.load_state_dict({"samples_consumed": done_rounds * h * stream.per_step})
    for rnd in range(done_rounds + 1, rounds + 1):
        for k in range(1, h + 1):
            t0 = time.perf_counter()
            step = (rnd - 1) * h + k
            if fault:
                fault.at(rank, step)
            lr = lr_at(min(step, rounds * h), rounds * h, t.lr, t.warmup_steps)
            engine.set_lr(lr)
            inputs, targets = task.batch(stream.next(), device)
            loss = engine.forward_backward(inputs, targets, last=True, scale=1.0)
            engine.step()
            dt = time.perf_counter() - t0
            if step % t.log_every == 0 or k == h:
                rec = {
                    "kind": "step",
                    "step": step,
                    "round": rnd,
                    "loss": loss,
                    "lr": lr,
                    "step_time_s": dt,
                    "samples": batches[rank],
                    "samples_per_s": batches[rank] / dt,
                    "tokens_per_s": batches[rank] * task.seq_len / dt if task.kind != "image" else None,
                    "sync_wait_s": 0.0,
                    "world_size": world,
                    "strategy": "diloco",
                    "local_steps": h,
                    "node_name": nodes[my_node].node,
                }
                rec.update(memory_record(engine))
                writer.write(StepRecord.of(**rec))
        wait, comm = _outer_step(params, outer_params, outer_opt, world)
        writer.write(
            {
                "kind": "outer",
                "round": rnd,
                "step": rnd * h,
                "sync_wait_s": wait,
                "outer_comm_s": comm,
                "local_steps": h,
                "node_name": nodes[my_node].node,
                "world_size": world,
                "strategy": "diloco",
            }
        )
        if ckpt and ckpt.after_step(rnd * base_h, stream.samples_consumed):
            break
    if ckpt:
        ckpt.close()


def _outer_state(outer_params, outer_opt):
    """DiLoCo's outer state (the outer parameters and Nesterov momentum, the same on every rank) for a
    checkpoint, and the function that puts a loaded one back."""
    sd = {f"param.{i}": p for i, p in enumerate(outer_params)}
    for i, p in enumerate(outer_params):
        buf = outer_opt.state.get(p, {}).get("momentum_buffer")
        sd[f"momentum.{i}"] = buf if buf is not None else torch.zeros_like(p)
    has_momentum = any(outer_opt.state.get(p) for p in outer_params)

    def restore(loaded: dict) -> None:
        with torch.no_grad():
            for i, p in enumerate(outer_params):
                p.copy_(loaded[f"param.{i}"])
                if has_momentum or loaded[f"momentum.{i}"].abs().sum() > 0:
                    outer_opt.state[p]["momentum_buffer"] = loaded[f"momentum.{i}"].clone()

    return sd, restore


def _diloco_nodes(plan, world: int):
    """The plan's nodes, or (a DiLoCo plan without them) one node per rank with the plan's local steps."""
    if plan.nodes:
        return plan.nodes
    return tuple(
        NodeAllocation(
            node=f"rank{r}",
            gpus=1,
            tflops=0,
            relative_speed=1,
            batch_per_gpu=plan.micro_batch,
            data_share=1 / world,
            local_steps=plan.local_steps or 10,
        )
        for r in range(world)
    )


def _outer_step(params, outer_params, outer_opt, world: int) -> tuple[float, float]:
    """DiLoCo's outer step: wait for every node (measured), average the pseudo-gradients, Nesterov SGD, and load
    the result into the model. Returns (seconds waited at the barrier, seconds of the all-reduce and step)."""
    w0 = time.perf_counter()
    dist.barrier()
    wait = time.perf_counter() - w0
    c0 = time.perf_counter()
    for p, op in zip(params, outer_params):
        delta = op - _full(p).detach().cpu().float()
        dist.all_reduce(delta)
        op.grad = delta / world
    outer_opt.step()
    outer_opt.zero_grad()
    with torch.no_grad():
        for p, op in zip(params, outer_params):
            _assign(p, op)
    return wait, time.perf_counter() - c0
