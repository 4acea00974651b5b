"""Evidence scopes: where a rule's finding was measured, so that it moves plans only there.

A rule that prefers or avoids plans (or sets a setting) cites a measurement; `[rule.evidence]` says what
that measurement covered:

```toml
[rule.evidence]
params = [1.2e7, 1.08e8]              # model sizes measured (total parameters, inclusive)
gpu_arch = ["turing", "ampere"]       # GPU architectures (catalogue `arch`) every GPU must have
intra_link = ["pcie"]                 # link classes between GPUs inside a node (nodes with 2+ GPUs)
inter_link = ["ethernet"]             # link classes between nodes (clusters of 2+ nodes)
strategies = ["ddp", "tp"]            # plan strategies compared (every part of a plan must be one)
note = "free text: what was not stated"
```
Any key may be left out (that dimension is not limited). Outside the scope the rule still fires and is
shown with why it did not move anything; the cost model's order stands.
Link classes: pcie, nvlink, infiniband, ethernet, wan, infinity-fabric, local. Strategies: single, ddp,
tp, pp, zero1, zero2, zero3, fsdp, hsdp, diloco.
"""

from __future__ import annotations

from paradvisor.errors import InputError

EVIDENCE_KEYS = {"params", "gpu_arch", "intra_link", "inter_link", "strategies", "note"}
LINK_CLASSES = ("pcie", "nvlink", "infiniband", "ethernet", "wan", "infinity-fabric", "local")
STRATEGIES = ("single", "ddp", "tp", "pp", "zero1", "zero2", "zero3", "fsdp", "hsdp", "diloco")
GPU_ARCHS = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cpu")


def link_class(kind: str) -> str:
    k = kind.lower()
    for prefix, cls in (
        ("pcie", "pcie"),
        ("nvlink", "nvlink"),
        ("ib", "infiniband"),
        ("infiniband", "infiniband"),
        ("ethernet", "ethernet"),
        ("wan", "wan"),
        ("infinity", "infinity-fabric"),
    ):
        if k.startswith(prefix):
            return cls
    return "local"


def plan_strategies(plan) -> set[str]:
    tags = set()
    if plan.diloco:
        tags.add("diloco")
    if plan.tp > 1:
        tags.add("tp")
    if plan.pp > 1:
        tags.add("pp")
    if plan.sharding != "none":
        tags.add(plan.sharding)
    elif plan.dp > 1 and not plan.diloco:
        tags.add("ddp")
    return tags or {"single"}


def check(evidence, where: str) -> dict:
    """The evidence table of a rule file, checked (InputError naming the key otherwise)."""
    if not isinstance(evidence, dict):
        raise InputError("evidence must be a table ([rule.evidence])", where=where)
    extra = sorted(set(evidence) - EVIDENCE_KEYS)
    if extra:
        raise InputError(
            f"unknown evidence key {extra[0]!r}; expected {', '.join(sorted(EVIDENCE_KEYS))}", where=where
        )
    p = evidence.get("params")
    if p is not None and not (
        isinstance(p, list)
        and len(p) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in p)
        and p[0] <= p[1]
    ):
        raise InputError("evidence.params must be [smallest, largest] parameter counts", where=where)
    for key, allowed in (
        ("gpu_arch", GPU_ARCHS),
        ("intra_link", LINK_CLASSES),
        ("inter_link", LINK_CLASSES),
        ("strategies", STRATEGIES),
    ):
        v = evidence.get(key)
        if v is None:
            continue
        if not (isinstance(v, list) and v and all(isinstance(x, str) for x in v)):
            raise InputError(f"evidence.{key} must be a non-empty list of names", where=where)
        bad = [x for x in v if x not in allowed]
        if bad:
            raise InputError(
                f"evidence.{key}: unknown {bad[0]!r}; expected one of {', '.join(allowed)}", where=where
            )
    if "note" in evidence and not isinstance(evidence["note"], str):
        raise InputError("evidence.note must be a string", where=where)
    return dict(evidence)


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def request_outside(evidence: dict | None, profile, cluster) -> str | None:
    """Why this model and these machines lie outside the evidence (None: inside)."""
    if not evidence:
        return None
    p = evidence.get("params")
    if p and not p[0] <= profile.total_params <= p[1]:
        return (
            f"{profile.name} has {_count(profile.total_params)} parameters; the evidence covers "
            f"{_count(p[0])}-{_count(p[1])}"
        )
    nodes = [n for n in cluster.online_nodes if n.gpus]
    archs = evidence.get("gpu_arch")
    if archs:
        mine = sorted({g.spec.arch for n in nodes for g in n.gpus if g.spec} - set(archs))
        if mine:
            return f"{mine[0]} GPUs; the evidence is from {', '.join(archs)} GPUs"
    intra = evidence.get("intra_link")
    if intra:
        mine = sorted({link_class(n.intra_link.kind) for n in nodes if n.gpu_count > 1} - set(intra))
        if mine:
            return f"GPUs joined by {mine[0]}; the evidence is from {', '.join(intra)}"
    inter = evidence.get("inter_link")
    if inter and len(nodes) > 1:
        link = cluster.slowest_inter_link()
        if link is not None and link_class(link.kind) not in inter:
            return f"nodes joined by {link_class(link.kind)}; the evidence is from {', '.join(inter)}"
    return None


def plan_outside(evidence: dict | None, plan) -> str | None:
    if not evidence or not evidence.get("strategies"):
        return None
    extra = sorted(plan_strategies(plan) - set(evidence["strategies"]))
    if extra:
        return f"{extra[0]} was not part of the comparison ({', '.join(evidence['strategies'])})"
    return None
