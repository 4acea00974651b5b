"""Expert parallelism (EP) for Hugging Face mixture-of-experts models, with transformers' own EP plan.

transformers ships `base_model_ep_plan` for its MoE models (Mixtral, Qwen2-MoE, OLMoE, ...): the fused
expert weights (`experts.gate_up_proj`, `experts.down_proj`, shape [experts, ...]) are sharded by expert
(`Shard(0)`, "grouped_gemm") and each `experts` module reaches its experts through an all-to-all
dispatch and combine ("ep_dispatch_experts", `AllToAllEP` in training). We apply that plan unchanged
(`transformers.distributed.expert_parallel.apply_expert_parallelism`) on our own mesh and do the data
parallelism around it ourselves:

  ranks        0     1     2     3          ep = 2, dp = 4: experts E0..E3
  EP group     [ 0   1 ]   [ 0   1 ]        ranks of one EP group hold different experts
  experts      E0E1  E2E3  E0E1  E2E3       and exchange tokens with all-to-all
  replica      ---- 0 ---  ---- 1 ---       the same expert shard on ranks of one "expert-DP" group

EP x FSDP shards each experts module over its expert-DP group and the rest over all ranks
(`apply_ep_fsdp`, torchtitan's layout). Every rank trains on its own data shard (dp = world). Dense weights are replicated: their gradients
are averaged over all ranks, as DDP would. An expert shard's gradient arrives through the all-to-all
already summed over its EP group's tokens, so it is summed over the expert-DP group and divided by the
world size: the gradient of the mean loss over all ranks, as one process would compute it (proved by
`paradvisor verify`, tests/run/test_equivalence.py).
"""

# ruff: noqa: TID253 - the trainer (train/) is the torch side: its heavy imports are at module level
from __future__ import annotations

import re

import torch.distributed as dist

from paradvisor.model import families
from paradvisor.train.data_parallel import apply_fsdp, average_grads, fsdp_precision


def expanded_plan(model, family: str | None = None) -> dict[str, str]:
    """The family module's EP plan (transformers' base_model_ep_plan as data, model/families/), or the
    model's own, with its `*` layer wildcards expanded to the modules and parameters that exist
    (DeepSeek-style models keep dense MLPs in their first layers)."""
    fam_plan = families.get(family).ep_plan if family else {}
    plan = {
        k.replace("layers.*.", "model.layers.*.", 1) if not k.startswith("model.") else k: v
        for k, v in fam_plan.items()
    }
    plan = plan or dict(getattr(model, "ep_plan", None) or {})
    if not plan:
        raise ValueError(f"{type(model).__name__} has no expert-parallel plan in transformers")
    names = [n for n, _ in model.named_modules()] + [n for n, _ in model.named_parameters()]
    out: dict[str, str] = {}
    for pattern, style in plan.items():
        rx = re.compile(re.escape(pattern).replace(r"\*", r"\d+"))
        for name in names:
            if rx.fullmatch(name):
                out[name] = style
    return out


def apply_ep(model, edp_mesh, ep_mesh, tp_mesh, family: str | None = None):
    """Shard the experts of `model` over the `ep_mesh` groups (the plan's mesh, train/mesh.py: the
    data-parallel dimension, then ep, fastest). `tp_mesh`: the size-1 tp dimension — transformers' dispatch
    asks which ranks share a batch (none do here, each rank reads its own data shard). Returns (the
    expert-DP mesh, the expert modules)."""
    from transformers.distributed.expert_parallel import apply_expert_parallelism

    ep_plan = expanded_plan(model, family)
    apply_expert_parallelism(model, ep_mesh, tp_mesh, ep_plan)
    modules = dict(model.named_modules())
    return edp_mesh, [modules[n] for n, style in ep_plan.items() if style == "ep_dispatch_experts"]


def apply_ep_fsdp(model, expert_modules, edp_mesh, all_mesh, world: int, precision: str) -> None:
    """EP x FSDP, as torchtitan does it: each experts module fully sharded over its expert-DP ranks (the
    ranks holding the same experts), the blocks and the root over all ranks. An expert gradient arrives
    summed over its EP group's tokens; the reduce-scatter sums it over the expert-DP group, and dividing by
    the world size gives the mean-loss gradient. `all_mesh`: every rank, expert-DP x EP flattened."""
    from torch.distributed.fsdp import fully_shard

    for mod in expert_modules:
        fully_shard(mod, mesh=edp_mesh, **fsdp_precision(precision))
        mod.set_gradient_divide_factor(float(world))
        if dist.get_backend(edp_mesh.get_group()) == "gloo":
            mod.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM: sum, then scale
    apply_fsdp(model, all_mesh, precision)


def is_expert(p) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(p, DTensor)


def reduce_grads(params, world: int, edp_mesh) -> None:
    """Dense gradients: averaged over all ranks. Expert shards (DTensors on the EP mesh): summed over
    the expert-DP group, divided by the world size."""
    average_grads([p for p in params if not is_expert(p)], None, world)
    average_grads([p for p in params if is_expert(p)], edp_mesh.get_group(), world)
