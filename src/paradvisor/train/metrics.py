"""metrics.jsonl (one JSON object per line, appended and flushed by every rank) and memory accounting.

Model-state bytes are counted from the tensors a rank holds: parameters (local shards of FSDP
DTensors, DeepSpeed ZeRO-3 partitions), gradients, and optimizer states (torch optimizer state,
DeepSpeed's fp32 master partitions and their gradients). Tensors sharing storage are counted once.
"""

from __future__ import annotations

import json
import os
import time


class MetricsWriter:
    def __init__(self, path, rank: int):
        self.fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.rank = rank
        # The node (its index in the plan's launch) this rank runs on: multi-node monitors group ranks by it.
        node = os.environ.get("PARADVISOR_NODE_INDEX", "0")
        self.node = int(node) if node.isdigit() else 0

    def write(self, record: dict) -> None:
        record = {"rank": self.rank, "node": self.node, "time": time.time(), **record}
        os.write(self.fd, (json.dumps(record, default=float) + "\n").encode())  # one write: whole line or nothing

    def close(self) -> None:
        os.close(self.fd)


def _local(t):
    if t is None:
        return None
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t


def _storage_key_and_bytes(t):
    try:
        st = t.untyped_storage()
        return (st.data_ptr(), st.nbytes()) if st.nbytes() else None
    except (RuntimeError, NotImplementedError):
        return None


def count_bytes(groups: dict[str, list]) -> dict[str, int]:
    """Bytes per category, each storage counted once (in the first category that holds it)."""
    seen: set[int] = set()
    out = {}
    for name, tensors in groups.items():
        total = 0
        for t in tensors:
            t = _local(t)
            if t is None or not hasattr(t, "untyped_storage"):
                continue
            kb = _storage_key_and_bytes(t)
            if kb is None or kb[0] in seen:
                continue
            seen.add(kb[0])
            total += kb[1]
        out[name] = total
    return out


def optimizer_state_tensors(opt) -> list:
    out = []
    if opt is None:
        return out
    for state in getattr(opt, "state", {}).values():
        if isinstance(state, dict):
            out.extend(v for v in state.values() if hasattr(v, "untyped_storage") and getattr(v, "dim", lambda: 0)())
    return out


def cuda_peak() -> int | None:
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return None


class ActivationMeter:
    """Bytes of tensors autograd saves for backward during a forward pass, measured exactly with
    `torch.autograd.graph.saved_tensors_hooks`: each saved storage counted once, parameters (and views
    of them) excluded. Use as a context manager around one micro-batch's forward (and backward)."""

    def __init__(self, params):
        self.param_storages = set()
        for p in params:
            t = _local(p)
            try:
                self.param_storages.add(t.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError, AttributeError):
                pass
        self.storages: dict[int, object] = {}
        self.bytes = 0
        self._ctx = None

    def _pack(self, t):
        try:
            st = _local(t).untyped_storage()  # DTensors (TP, FSDP) are measured by their local shard
            ptr = st.data_ptr()
            if ptr not in self.param_storages and ptr not in self.storages and ptr != 0:
                self.storages[ptr] = st
        except (RuntimeError, NotImplementedError):
            pass
        return t

    def __enter__(self):
        import torch

        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        # Sizes are read now: storages that FSDP gathered for a layer and freed again (resized to 0)
        # are model states on loan, not activations.
        self.bytes = sum(st.nbytes() for st in self.storages.values())
        self.storages.clear()
        return False
