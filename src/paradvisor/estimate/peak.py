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


def peak_bytes(terms: dict[str, float], *, grads_kept_in_step: bool = False) -> float:
    """The peak of a breakdown (`peak_breakdown`'s terms summed): the two phases do not coexist."""
    return _peak(terms, grads_kept_in_step)[1]


def phase_peak(held: list, fwd: list, step_grads, kept: bool) -> tuple[str, float]:
    """The phase and the peak from the terms' values: `held` in the order of HELD, `fwd` in the order of FWD_BWD
    (what the search weighs for every stage, without a dict of them); `kept`: ZeRO-3 keeps its 16-bit gradients
    through the optimizer step."""
    step = [step_grads, fwd[0]] if kept else [step_grads]
    if sum(step) > sum(fwd):
        return "optimizer step", sum(held + step)
    return "forward/backward", sum(held + fwd)


def _peak(terms: dict, kept: bool) -> tuple[str, float, tuple[str, ...]]:
    """(phase, peak: the alive terms summed in the order named, the names of the terms alive)."""
    g = terms.get
    held, fwd = [g(k, 0.0) for k in HELD], [g(k, 0.0) for k in FWD_BWD]
    phase, total = phase_peak(held, fwd, g("step_grads", 0.0), kept)
    if phase == "optimizer step":
        return phase, total, HELD + (("step_grads", "grads") if kept else ("step_grads",))
    return phase, total, HELD + FWD_BWD
