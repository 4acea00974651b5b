"""metrics.jsonl (one JSON object per line, appended and flushed by every rank) and memory accounting.

Measured with the names the estimator predicts (`estimate/memory.py`), so `validate` compares each
term with its twin:
  mem_params_bytes / mem_grads_bytes / mem_optimizer_bytes   what a rank holds (local shards of FSDP
        DTensors; for DeepSpeed every tensor its optimizer holds, found by walking it: 16-bit parameters
        and partitions, persistent ZeRO-3 parameters, 16-bit gradient partitions, fp32 masters, Adam m, v)
  mem_step_grads_bytes   DeepSpeed's fp32 gradient partition, alive only inside the optimizer step
  activation_bytes       tensors saved for backward (one micro-batch), parameters and their copies excluded
  act_working_bytes      16-bit weight copies autocast saved for backward
  act_gathered_bytes     parameters on loan (ZeRO-3 / FSDP gathered) saved for backward, most alive at once
Tensors sharing storage are counted once; meta tensors (no memory) not at all.
"""

from __future__ import annotations

from paradvisor.rundir.metrics import MetricsWriter

__all__ = ["MetricsWriter"]


def _local(t):
    if t is None:
        return None
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t


def _storage_key_and_bytes(t):
    try:
        if t.device.type == "meta":
            return None
        st = t.untyped_storage()
        return (st.data_ptr(), st.nbytes()) if st.nbytes() and st.data_ptr() else None
    except (RuntimeError, NotImplementedError):
        return None


def whole_numel(p) -> int:
    """A parameter's elements, whole: ZeRO-3 keeps a partitioned one's full count in `ds_numel` (its tensor may
    hold only this rank's part, or nothing); a DTensor's `numel()` is already the global one."""
    return getattr(p, "ds_numel", None) or p.numel()


def whole_size(model, *, in_bytes: bool = False) -> int:
    """A model's parameters, whole (whole_numel): their elements, or (`in_bytes`) their bytes."""
    return sum(whole_numel(p) * (p.element_size() if in_bytes else 1) for p in model.parameters())


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
            out.extend(
                v for v in state.values() if hasattr(v, "untyped_storage") and getattr(v, "dim", lambda: 0)()
            )
    return out


_DS_BUFFERS = ("ipg", "bucket", "buffer_for", "temp", "reduce_buffer", "round_robin", "meta")
_DS_GRADS = ("grad",)
_DS_OPTIMIZER = ("fp32", "master", "single_partition")
_DS_PARAMS = ("bit16", "fp16", "bf16", "persistent", "param")


def _tensors_in(obj, depth: int = 0) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth >= 3:
        return []
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors_in(x, depth + 1)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors_in(x, depth + 1)]
    return []


def deepspeed_state_groups(engine) -> dict[str, list]:
    """Every tensor a DeepSpeed engine's optimizer holds, by what it is (from the attribute that holds it):
    communication buckets are left out (they are buffers, not model states)."""
    opt = engine.optimizer
    groups: dict[str, list] = {"params": [], "grads": [], "optimizer": [], "buffers": []}
    for name, val in sorted(vars(opt).items()):
        low = name.lower()
        ts = _tensors_in(val)
        if not ts:
            continue
        if any(k in low for k in _DS_BUFFERS):
            groups["buffers"] += ts
        elif any(k in low for k in _DS_GRADS):
            groups["grads"] += ts
        elif any(k in low for k in _DS_OPTIMIZER):
            groups["optimizer"] += ts
            groups["grads"] += [t.grad for t in ts if getattr(t, "grad", None) is not None]
        elif any(k in low for k in _DS_PARAMS):
            groups["params"] += ts
    for p in engine.module.parameters():
        groups["params"] += [getattr(p, "ds_tensor", None), p]
        if p.grad is not None:
            groups["grads"].append(p.grad)
    inner = getattr(opt, "optimizer", None)
    groups["optimizer"] += optimizer_state_tensors(inner if inner is not None else opt)
    return groups


def cuda_peak() -> tuple[int, int] | None:
    """(allocated, reserved) peak bytes of torch's CUDA caching allocator on this rank's GPU, or None on CPU."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved())
    return None


_VIEWS = (
    "TBackward0",
    "PermuteBackward0",
    "TransposeBackward0",
    "ViewBackward0",
    "ExpandBackward0",
    "UnsafeViewBackward0",
    "AsStridedBackward0",
    "SliceBackward0",
    "SelectBackward0",
    "AliasBackward0",
)


def _is_weight_copy(t) -> bool:
    """A tensor made by casting a parameter (autocast's 16-bit copy), possibly seen through a view."""
    fn = t.grad_fn
    for _ in range(4):
        if fn is None or type(fn).__name__ not in _VIEWS:
            break
        fn = fn.next_functions[0][0] if fn.next_functions else None
    if fn is None or type(fn).__name__ != "ToCopyBackward0" or not fn.next_functions:
        return False
    nxt = fn.next_functions[0][0]
    return nxt is not None and hasattr(nxt, "variable")


class ActivationMeter:
    """Bytes of tensors autograd saves for backward during one micro-batch, measured exactly with
    `torch.autograd.graph.saved_tensors_hooks`, each saved storage counted once and sorted like the
    estimator's terms: parameters a rank holds are excluded; parameters on loan (ZeRO-3 / FSDP gathered)
    are `gathered` (most alive at once); 16-bit casts of weights are `working`; the rest `activations`.
    Use as a context manager around one micro-batch's forward (and backward)."""

    def __init__(self, params):
        self.param_storages = set()
        for p in params:
            t = _local(p)
            try:
                self.param_storages.add(t.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError, AttributeError):
                pass
        self.storages: dict[int, object] = {}
        self.copies: dict[int, object] = {}
        self.loans: dict[int, tuple] = {}  # ptr -> (weak handle or None, bytes at pack time)
        self.bytes = 0
        self.working_bytes = 0
        self.gathered_bytes = 0
        self._ctx = None

    def _loan_alive(self) -> int:
        import torch

        total = 0
        for handle, nbytes in self.loans.values():
            if handle is None:
                total += nbytes
                continue
            try:
                if not torch.UntypedStorage._expired(handle):
                    total += nbytes
            except (AttributeError, RuntimeError):
                total += nbytes
        return total

    def _pack(self, t):
        import torch

        try:
            st = _local(t).untyped_storage()  # DTensors (TP, FSDP) are measured by their local shard
            ptr = st.data_ptr()
            if ptr == 0 or ptr in self.param_storages or ptr in self.storages or ptr in self.copies:
                return t
            base = t._base if t._base is not None else t
            if isinstance(t, torch.nn.Parameter) or isinstance(base, torch.nn.Parameter):
                if ptr not in self.loans:
                    try:
                        handle = st._weak_ref()
                    except (AttributeError, RuntimeError):
                        handle = None
                    self.loans[ptr] = (handle, st.nbytes())
                    self.gathered_bytes = max(self.gathered_bytes, self._loan_alive())
            elif _is_weight_copy(t):
                self.copies[ptr] = st
            else:
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
        import torch

        self._ctx.__exit__(*exc)
        # Sizes are read now: storages that FSDP gathered for a layer and freed again (resized to 0)
        # are model states on loan, not activations.
        self.bytes = sum(st.nbytes() for st in self.storages.values())
        self.working_bytes = sum(st.nbytes() for st in self.copies.values())
        for handle, _ in self.loans.values():
            if handle is not None:
                try:
                    torch.UntypedStorage._free_weak_ref(handle)
                except (AttributeError, RuntimeError):
                    pass
        self.storages.clear()
        self.copies.clear()
        self.loans.clear()
        return False
