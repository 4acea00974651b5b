"""Megatron-Core's way of holding a model, for the "mcore" engine (plan.engines.ENGINES): its activations
with per-module recompute and Transformer Engine's fused cross-entropy (estimate/mcore_memory.py), and
the distributed optimizer's gradient buffer. Used by plan.evaluate where the engine is "mcore"; the blocks'
activations for every engine whose traits say `block_memory = "mcore"` (plan/engines.py ENGINES: their head and
loss stay their own, TE's fused cross-entropy is Megatron-Bridge's). "llama3" is one: Meta's code is not
public, and Hugging Face's eager block (fp32 norm copies, rotary copies, traced) would need ~106 GiB of 80 on
the 405B run the paper trained "without activation checkpointing" (docs/accuracy.md)."""

from __future__ import annotations

from paradvisor.estimate import mcore_memory, moe
from paradvisor.plan import moe_step
from paradvisor.plan.facts import ModelFacts
from paradvisor.spec.plan import Plan, Workload

# Megatron-Bridge's performance scripts reduce gradients in bf16 (`cfg.ddp.grad_reduce_in_fp32 = False` in
# scripts/performance/configs/{gpt_oss,deepseek,qwen3}/*_llm_pretrain.py, v0.2.x): a 2-byte gradient buffer
GRAD_BUFFER_BYTES = 2


def applies(mf: ModelFacts, plan: Plan) -> bool:
    return mf.traits.block_memory == "mcore" and mf.shape is not None and plan.checkpointing != "full"


def activation_terms(
    a: dict, mf: ModelFacts, wl: Workload, plan: Plan, micro_batch: int, act_bytes: int
) -> dict:
    """plan.evaluate's activation terms with the blocks and the head as Megatron-Core keeps them."""
    s = mf.shape
    tokens = micro_batch * wl.seq_len // plan.cp
    kw = {
        "tokens": tokens,
        "tp": plan.tp,
        "sequence_parallel": plan.sequence_parallel,
        "act_bytes": act_bytes,
    }
    modules = mf.recompute_modules if plan.checkpointing == "selective" else ()
    capacity = moe_step.capacity(mf) if mf.moe else 1.0
    blk = mcore_memory.block_bytes(s, modules=modules, capacity=capacity, fp8=plan.precision == "fp8", **kw)
    out = dict(a)
    out["block"] = out["lastblock"] = blk["stored"]
    out["rebuilt"] = blk["working"]
    if mf.engine == "mcore":
        out["last"] = mcore_memory.loss_bytes(s, **kw) if mf.lm_head else 0.0
    return out


def grads(mf: ModelFacts, plan: Plan, psi: float, layers: int | None = None) -> float:
    """Megatron-Core's distributed optimizer keeps a whole gradient buffer for the parameters the rank
    holds (it reduce-scatters into it and steps on its shard: distributed_data_parallel.py, param_and_grad_buffer.py);
    only the fp32 main parameters and Adam moments are sharded (estimate/memory.model_state_bytes, "zero1")."""
    if mf.moe is not None and plan.ep > 1:
        psi = moe.rank_params(psi, expert_psi=moe_step.stage_experts(mf, plan, layers), ep=plan.ep)
    return GRAD_BUFFER_BYTES * psi


def grad_buffer(states, mf: ModelFacts, plan: Plan):
    """A MoE model's `states(psi, layers)` with the distributed optimizer's whole gradient buffer (`grads`)
    where Megatron-Core runs it (the "mcore" engine with "zero1"); `states` itself elsewhere."""
    if mf.engine != "mcore" or plan.sharding != "zero1":
        return states
    return lambda psi, layers=None: {**states(psi, layers), "grads": grads(mf, plan, psi, layers)}
