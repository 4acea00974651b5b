"""The fact vocabulary rule conditions may use, and how facts are computed.

Each entry: name -> (type, description). Types: num, bool, str. Values of str facts that name a
strategy are checked against STRATEGY_VALUES by `paradvisor rules check`.
"""

from __future__ import annotations

from paradvisor.estimate.stages import bubble_fraction
from paradvisor.hardware.speeds import effective_peak, node_tflops, wan_cluster

VOCABULARY: dict[str, tuple[str, str]] = {
    # model
    "model.params": ("num", "total parameters"),
    "model.layers": ("num", "transformer layers (0 for non-transformers)"),
    "model.hidden": ("num", "hidden size (0 for non-transformers)"),
    "model.heads": ("num", "attention heads (0 for non-transformers)"),
    "model.largest_share": ("num", "share of all parameters in the largest layer, 0..1"),
    "model.dominant": ("bool", "one layer holds at least half of the parameters"),
    "model.transformer": ("bool", "the model is a transformer"),
    "model.causal": ("bool", "a decoder (causal LM)"),
    "model.shared_layers": ("bool", "layers share weights (ALBERT)"),
    # cluster
    "cluster.nodes": ("num", "online nodes"),
    "cluster.gpus": ("num", "online GPUs"),
    "cluster.gpu_types": ("num", "distinct GPU models"),
    "cluster.heterogeneous": ("bool", "more than one GPU model"),
    "cluster.min_gpus_per_node": ("num", "fewest GPUs in a node"),
    "cluster.max_gpus_per_node": ("num", "most GPUs in a node"),
    "cluster.intra_bw": ("num", "slowest GPU-to-GPU link inside a node, bytes/s"),
    "cluster.nvlink": ("bool", "every node's GPUs are joined by NVLink"),
    "cluster.inter_bw": ("num", "slowest link between nodes, bytes/s (0 for one node)"),
    "cluster.inter_latency": ("num", "latency of that link, s"),
    "cluster.wan": ("bool", "nodes are joined by a wide-area link (kind wan or <= 1 Gbit/s)"),
    "cluster.gpu_speed_ratio": ("num", "fastest / slowest GPU peak for the planned precision"),
    "cluster.node_speed_ratio": ("num", "fastest / slowest node average peak (003 Table 2)"),
    "cluster.more_but_slower": (
        "bool",
        "some node has more GPUs but less total throughput than another (001)",
    ),
    "cluster.straggler": ("str", "name of that node ('' if none)"),
    "cluster.mig": ("bool", "some devices are MIG slices"),
    # workload
    "workload.seq_len": ("num", "sequence length"),
    "workload.global_batch": ("num", "samples per optimizer step"),
    "workload.precision": ("str", "planned precision: fp32, fp16, bf16, fp8"),
    # plan (candidate)
    "plan.dp": ("num", "data-parallel degree"),
    "plan.tp": ("num", "tensor-parallel degree"),
    "plan.pp": ("num", "pipeline stages"),
    "plan.sharding": ("str", "none, zero1, zero2, zero3, fsdp, hsdp"),
    "plan.zero": ("num", "ZeRO stage equivalent (FSDP/HSDP = 3)"),
    "plan.sharded": ("bool", "optimizer states are sharded (ZeRO >= 1 or FSDP)"),
    "plan.micro_batch": ("num", "micro-batch per GPU"),
    "plan.micro_batches": ("num", "micro-batches per step (pipeline m, or accumulation)"),
    "plan.checkpointing": ("str", "none, selective, full"),
    "plan.offload": ("str", "none, optimizer, optimizer+params"),
    "plan.sequence_parallel": ("bool", "sequence parallelism with TP"),
    "plan.pp_schedule": ("str", "gpipe, 1f1b, interleaved1f1b"),
    "plan.diloco": ("bool", "DiLoCo local steps"),
    "plan.local_steps": ("num", "DiLoCo base local steps (0 if none)"),
    "plan.split_by_speed": ("bool", "per-rank batch in proportion to GPU speed"),
    # estimate (candidate)
    "est.memory_gib": ("num", "predicted memory per GPU, GiB"),
    "est.memory_fraction": ("num", "predicted memory / usable memory"),
    "est.step_time": ("num", "predicted step time, s"),
    "est.samples_per_s": ("num", "predicted throughput"),
    "est.bubble_fraction": ("num", "pipeline bubble (p-1)/v over m+(p-1)/v, 0 without PP"),
    "est.comm_fraction": ("num", "exposed communication / step time"),
    "est.tp_comm_fraction": ("num", "tensor-parallel communication / step time"),
}

STRATEGY_VALUES: dict[str, tuple[str, ...]] = {
    "plan.sharding": ("none", "zero1", "zero2", "zero3", "fsdp", "hsdp"),
    "plan.checkpointing": ("none", "selective", "full"),
    "plan.offload": ("none", "optimizer", "optimizer+params"),
    "plan.pp_schedule": ("gpipe", "1f1b", "interleaved1f1b"),
    "workload.precision": ("fp32", "fp16", "bf16", "fp8"),
}

TYPES = {k: v[0] for k, v in VOCABULARY.items()}
PLAN_FACTS = {k for k in VOCABULARY if k.startswith(("plan.", "est."))}


def base_facts(profile, cluster, workload, precision: str) -> dict:
    """Facts that do not depend on the candidate plan."""
    s = profile.transformer
    online = cluster.online_nodes
    runs = cluster.runs()  # alike consecutive nodes: the facts cost what is distinct, not the node count
    nodes = [r.node for r in runs]
    specs = [sp for _name, sp, _count in cluster.gpu_kinds() if sp]
    peaks = [effective_peak(sp.tflops, precision, s is None) for sp in specs] or [1.0]
    node_speed = [node_tflops(n, precision) for n in nodes if n.gpus]
    totals = [
        (
            online[r.first + r.count - 1].name,
            r.node.gpu_count,
            node_tflops(r.node, precision) * r.node.gpu_count,
        )
        for r in runs
        if r.node.gpus
    ]
    straggler = ""
    for name, count, total in totals:
        if any(count > c2 and total < t2 for _, c2, t2 in totals):
            straggler = name
    inter = cluster.slowest_inter_link()
    return {
        "model.params": profile.total_params,
        "model.layers": s.num_layers if s else 0,
        "model.hidden": s.hidden if s else 0,
        "model.heads": s.heads if s else 0,
        "model.largest_share": profile.largest_share,
        "model.dominant": profile.one_layer_dominates,
        "model.transformer": s is not None,
        "model.causal": bool(s and s.causal),
        "model.shared_layers": bool(s and s.shared_layers),
        "cluster.nodes": len(online),
        "cluster.gpus": cluster.gpu_count,
        "cluster.gpu_types": len({sp.name for sp in specs}),
        "cluster.heterogeneous": len({sp.name for sp in specs}) > 1,
        "cluster.min_gpus_per_node": min((n.gpu_count for n in nodes), default=0),
        "cluster.max_gpus_per_node": max((n.gpu_count for n in nodes), default=0),
        "cluster.intra_bw": min((n.intra_link.bandwidth for n in nodes), default=0.0),
        "cluster.nvlink": all(n.intra_link.kind.startswith("nvlink") for n in nodes if n.gpu_count > 1)
        and any(n.gpu_count > 1 for n in nodes),
        "cluster.inter_bw": inter.bandwidth if inter else 0.0,
        "cluster.inter_latency": inter.latency if inter else 0.0,
        "cluster.wan": wan_cluster(cluster),
        "cluster.gpu_speed_ratio": max(peaks) / min(peaks),
        "cluster.node_speed_ratio": (max(node_speed) / min(node_speed))
        if node_speed and min(node_speed)
        else 1.0,
        "cluster.more_but_slower": bool(straggler),
        "cluster.straggler": straggler,
        "cluster.mig": any(sp.mig_of for sp in specs),
        "workload.seq_len": workload.seq_len,
        "workload.global_batch": workload.global_batch,
        "workload.precision": precision,
    }


def _step(e) -> float:
    return e.step_time or 1.0


def _comm_fraction(e) -> float:
    t = e.time
    return (
        t.get("dp_comm_exposed", 0) + t.get("tp_comm", 0) + t.get("pp_p2p", 0) + t.get("outer_sync", 0)
    ) / _step(e)


# How each plan and estimate fact is read from an estimate: one getter per fact, so that a reader asks only
# for the facts it needs (the rules engine: what a condition or a message names; est.* facts read the
# estimate's step time, which the search works out only when something asks, plan/evaluate.py).
PLAN_FACT_GETTERS = {
    "plan.dp": lambda e: e.plan.dp,
    "plan.tp": lambda e: e.plan.tp,
    "plan.pp": lambda e: e.plan.pp,
    "plan.sharding": lambda e: e.plan.sharding,
    "plan.zero": lambda e: e.plan.zero_stage,
    "plan.sharded": lambda e: e.plan.sharding != "none",
    "plan.micro_batch": lambda e: e.plan.micro_batch,
    "plan.micro_batches": lambda e: e.plan.grad_accum,
    "plan.checkpointing": lambda e: e.plan.checkpointing,
    "plan.offload": lambda e: e.plan.offload,
    "plan.sequence_parallel": lambda e: e.plan.sequence_parallel,
    "plan.pp_schedule": lambda e: e.plan.pp_schedule,
    "plan.diloco": lambda e: e.plan.diloco,
    "plan.local_steps": lambda e: e.plan.local_steps or 0,
    "plan.split_by_speed": lambda e: e.plan.split_by_speed,
    "est.memory_gib": lambda e: e.memory_total / 2**30,
    "est.memory_fraction": lambda e: e.ratio,
    "est.step_time": lambda e: e.step_time,
    "est.samples_per_s": lambda e: e.samples_per_s,
    "est.bubble_fraction": lambda e: bubble_fraction(
        e.plan.pp_schedule, e.plan.pp, e.plan.pp_virtual_stages, e.plan.grad_accum
    ),
    "est.comm_fraction": _comm_fraction,
    "est.tp_comm_fraction": lambda e: e.time.get("tp_comm", 0) / _step(e),
}


# The plan fields each plan fact is worked out from (a fact not here reads the estimate's memory or time): equal
# fields, equal facts, so a reader that keys on the facts' values may key on these fields (the rules engine: one
# attrgetter for what decides the conditions, not a getter call per fact; tests/advice/test_rule_fields.py).
PLAN_FACT_FIELDS = {
    "plan.dp": ("dp",),
    "plan.tp": ("tp",),
    "plan.pp": ("pp",),
    "plan.sharding": ("sharding",),
    "plan.zero": ("sharding",),
    "plan.sharded": ("sharding",),
    "plan.micro_batch": ("micro_batch",),
    "plan.micro_batches": ("grad_accum",),
    "plan.checkpointing": ("checkpointing",),
    "plan.offload": ("offload",),
    "plan.sequence_parallel": ("sequence_parallel",),
    "plan.pp_schedule": ("pp_schedule",),
    "plan.diloco": ("diloco",),
    "plan.local_steps": ("local_steps",),
    "plan.split_by_speed": ("split_by_speed",),
    "est.bubble_fraction": ("pp_schedule", "pp", "pp_virtual_stages", "grad_accum"),
}


# the facts read from an estimate's step time (plan/estimate.py works it out, for a plan that does not fit,
# only when one is read)
TIMED_FACTS = frozenset({"est.step_time", "est.samples_per_s", "est.comm_fraction", "est.tp_comm_fraction"})


def plan_facts(e) -> dict:
    """Every plan and estimate fact of one estimate."""
    return {name: get(e) for name, get in PLAN_FACT_GETTERS.items()}


class Facts(dict):
    """The request's facts and one estimate's, the estimate's read when first asked for (a dict: conditions
    index it, messages `.get` from it)."""

    def __init__(self, base: dict, e):  # (empty as made: dict's own __init__ would add nothing)
        self.base, self.estimate = base, e

    def __missing__(self, name: str):
        if name in self.base:
            value = self.base[name]
        else:
            get = PLAN_FACT_GETTERS.get(name)
            if get is None:
                raise KeyError(name)
            value = get(self.estimate)
        self[name] = value
        return value

    def get(self, name: str, default=None):
        try:
            return self[name]
        except KeyError:
            return default
