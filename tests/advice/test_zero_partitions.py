"""ZeRO-1/2's busiest rank (estimate.memory.zero_grad_elements) counted per boundary, not per rank: the same
answer as walking every one of the N partitions, for any tensor order and any N (131,072 GPUs in one call)."""

from __future__ import annotations

import bisect
import itertools

from hypothesis import given
from hypothesis import strategies as st

from paradvisor.estimate.memory import zero_grad_elements


def every_rank(order: list[int], n: int) -> int:
    """The definition: each of the n partitions, the tensors overlapping it."""
    total = sum(order)
    if n <= 1 or not order:
        return total
    part = -(-total // (2 * n)) * (2 * n) // n
    ends = list(itertools.accumulate(order))
    starts = [e - s for e, s in zip(ends, order)]
    best = 0
    for r in range(n):
        first = bisect.bisect_right(ends, r * part)
        last = bisect.bisect_left(starts, (r + 1) * part) - 1
        if last >= first:
            best = max(best, sum(order[first : last + 1]))
    return best


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=40), st.integers(1, 600))
def test_same_as_walking_every_partition(order, n):
    assert zero_grad_elements(order, n) == every_rank(order, n)


def test_a_70b_order_over_131072_ranks():
    order = [32000 * 8192] + [
        8192 * 8192,
        1024 * 8192,
        1024 * 8192,
        8192 * 8192,
        3 * 28672 * 8192,
        8192,
        8192,
    ] * 80
    assert zero_grad_elements(order, 131072) == every_rank(order, 131072)
