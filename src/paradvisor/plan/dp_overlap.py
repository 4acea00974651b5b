"""How much of a step's data-parallel synchronisation hides under its compute.

Gradients are reduced while the last micro-batch's backward pass runs (torch DDP's buckets, Megatron-Core's
`overlap_grad_reduce`, DeepSpeed's `overlap_comm`): OVERLAP of that backward can hide them. Where the
optimizer is sharded (ZeRO-1/2, Megatron-Core's distributed optimizer) the updated 16-bit weights are
all-gathered once a step as well, and engines differ in where that all-gather runs:
  in the backward window   with the reduce-scatter (the default: nothing overlaps it but what is left of the
                           backward pass after the gradients)
  in the next forward      Megatron-Core with `overlap_param_gather` (EngineTraits.gather_forward): the
                           all-gather of each bucket is dispatched from the forward pre-hooks of the next
                           step's first micro-batch, the next bucket's while the current one's layers run
                           (core_v0.15 `distributed_data_parallel.py` `_make_forward_pre_hook`,
                           `param_and_grad_buffer.py` `finish_param_sync`), so OVERLAP of that forward hides it.
                           Megatron-Bridge's recipes, NVIDIA's MLPerf GPT-3 configs (`overlap_param_sync`) and
                           the Megatron-LM README's benchmarks (`--overlap-param-gather`) run it so.
A second group's sync (the routed experts' gradients under EP, plan/expert_dp.py) gets what the first left
of each window.
"""

from __future__ import annotations

from paradvisor.record import record

OVERLAP = 0.8  # share of a pass a sync can hide under (every engine)


@record(frozen=True)
class Sync:
    """A step's data-parallel sync: seconds in all, seconds not hidden, and how much of the backward and of
    the next forward window it took (in_backward < 0: all of `total`, in the backward window)."""

    total: float
    exposed: float
    in_backward: float = -1.0
    in_forward: float = 0.0

    @property
    def backward_used(self) -> float:
        return self.total if self.in_backward < 0 else self.in_backward


NOTHING = Sync(0.0, 0.0, 0.0)  # no sync yet: both windows whole


def sharded_pair(rs: float, ag: float, t_bwd: float, t_fwd: float, gather_forward: bool) -> Sync:
    """A gradient reduce-scatter `rs` and a weight all-gather `ag` (seconds) beside a backward of `t_bwd`
    and, for an engine that gathers in the forward, a forward of `t_fwd` seconds."""
    return after(NOTHING, (rs, ag), t_bwd, t_fwd, gather_forward)


def after(first: Sync, second: tuple[float, float], t_bwd: float, t_fwd: float, gather_forward: bool) -> Sync:
    """`first` and then a second sync of (reduce, all-gather) seconds (all-gather 0: an all-reduce) in what
    `first` left of the windows."""
    rs, ag = second
    bwd = max(0.0, OVERLAP * t_bwd - first.backward_used)
    total = first.total + rs + ag
    if gather_forward and ag > 0:
        fwd = max(0.0, OVERLAP * t_fwd - first.in_forward)
        exposed = max(0.0, rs - bwd) + max(0.0, ag - fwd)
        return Sync(total, first.exposed + exposed, first.backward_used + rs, first.in_forward + ag)
    return Sync(total, first.exposed + max(0.0, rs + ag - bwd))
