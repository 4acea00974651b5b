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

Every rank trains on its own data shard (dp = world). Dense weights are replicated: their gradients
are averaged over all ranks, as DDP would. An expert shard's gradient arrives through the all-to-all
already summed over its EP group's tokens, so it is summed over the expert-DP group and divided by the
world size: the gradient of the mean loss over all ranks, as one process would compute it (proved by
`paradvisor verify`, tests/test_equivalence.py).
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist

# The trainer's families whose transformers config carries a `base_model_ep_plan` (tested against
# transformers in tests/test_equivalence.py); plan/capability.py holds the same list without torch.
from paradvisor.plan.capability import EP_FAMILIES  # noqa: F401  (re-exported for the trainer)


def ep_meshes(plan, device, world: int):
    """(ep mesh, tp mesh of size 1, expert-DP group or None) on a (edp, ep, tp) mesh, ep fastest."""
    from torch.distributed.device_mesh import init_device_mesh

    ep = plan.ep
    mesh = init_device_mesh(device.type, (world // ep, ep, 1), mesh_dim_names=("edp", "ep", "tp"))
    edp = mesh["edp"].get_group() if world // ep > 1 else None
    return mesh["ep"], mesh["tp"], edp


def expanded_plan(model) -> dict[str, str]:
    """transformers' EP plan of `model` with its `*` layer wildcards expanded to the modules and
    parameters that exist (DeepSeek-style models keep dense MLPs in their first layers)."""
    plan = dict(getattr(model, "ep_plan", None) or {})
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


def apply_ep(model, plan, device, world: int):
    """Shard the experts of `model` over EP groups of `plan.ep` ranks; returns the expert-DP group."""
    from transformers.distributed.expert_parallel import apply_expert_parallelism

    ep_mesh, tp_mesh, edp_group = ep_meshes(plan, device, world)
    experts = getattr(model.config, "num_local_experts", None) or getattr(model.config, "num_experts", None)
    if experts is not None and int(experts) % plan.ep:
        raise ValueError(f"{experts} experts cannot be split over ep = {plan.ep} ranks")
    apply_expert_parallelism(model, ep_mesh, tp_mesh, expanded_plan(model))
    return edp_group


def is_expert(p) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(p, DTensor)


def reduce_grads(params, world: int, edp_group) -> None:
    """Dense gradients: averaged over all ranks. Expert shards (DTensors on the EP mesh): summed over
    the expert-DP group, divided by the world size."""
    from paradvisor.train.parallelize import average_grads

    dense = [p for p in params if p.grad is not None and not is_expert(p)]
    experts = [p.grad.to_local() for p in params if p.grad is not None and is_expert(p)]
    average_grads(dense, None, world)
    for g in experts:
        if edp_group is not None:
            dist.all_reduce(g, group=edp_group)
        g.div_(world)


def expert_params(model) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if is_expert(p)]
