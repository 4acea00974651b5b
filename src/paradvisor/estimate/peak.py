"""The peak of a memory breakdown (estimate/memory.py names the terms): what is alive at once. Parameters,
optimizer states, buffers and overhead are held through the whole step; then the larger of the forward/backward
phase (gradients, activations, gathered units, working copies, the loss head's transient) and the optimizer step
(DeepSpeed's fp32 gradient partition; ZeRO-3 keeps its 16-bit one alongside): the two phases do not coexist."""

from __future__ import annotations

HELD = ("params", "optimizer", "buffers", "overhead")  # through the whole step
FWD_BWD = ("grads", "activations", "gathered", "working", "transient")  # forward and backward


def peak_breakdown(terms: dict[str, float], *, grads_kept_in_step: bool = False) -> tuple[str, dict]:
    """The phase at the peak ("forward/backward" or "optimizer step") and the terms alive then, which sum
    to the peak."""
    phase, _total, alive = _peak(terms, grads_kept_in_step)
    return phase, {k: terms.get(k, 0.0) for k in alive}


def peak_total(terms: dict[str, float], *, grads_kept_in_step: bool = False) -> tuple[str, float]:
    """`peak_breakdown`'s phase and the sum of its terms (the search asks it of every stage it weighs)."""
    return _peak(terms, grads_kept_in_step)[:2]


def peak_bytes(terms: dict[str, float], *, grads_kept_in_step: bool = False) -> float:
    """The peak of a breakdown (`peak_breakdown`'s terms summed): the two phases do not coexist."""
    return _peak(terms, grads_kept_in_step)[1]


def _peak(terms: dict, kept: bool) -> tuple[str, float, tuple[str, ...]]:
    """(phase, peak: the alive terms summed in the order named, the names of the terms alive)."""
    g = terms.get
    step_keys = ("step_grads", "grads") if kept else ("step_grads",)
    fwd, step, held = [g(k, 0.0) for k in FWD_BWD], [g(k, 0.0) for k in step_keys], [g(k, 0.0) for k in HELD]
    if sum(step) > sum(fwd):
        return "optimizer step", sum(held + step), HELD + step_keys
    return "forward/backward", sum(held + fwd), HELD + FWD_BWD
