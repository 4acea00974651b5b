"""probe-batch's search (commands/probe.gallop): from the memory model's prediction, gallop then bisect. Checked
against every threshold and start on a small range with a pure oracle; the real trial steps run in
tests/run/test_validate.py::test_probe_batch_finds_the_largest_micro_batch."""

from __future__ import annotations

import pytest

from paradvisor.commands.probe import gallop


@pytest.mark.parametrize("cap", [1, 2, 16, 17])
def test_gallop_finds_the_threshold_from_any_start(cap):
    for threshold in range(0, cap + 3):  # the largest micro-batch that fits (0: none)
        for start in range(1, cap + 1):
            tried: list[int] = []

            def fits(b, t=threshold):
                assert 1 <= b <= cap and b not in tried  # never outside 1..cap, never the same size twice
                tried.append(b)
                return b <= t

            largest, hit_max = gallop(fits, start, cap)
            assert largest == min(threshold, cap) and hit_max == (threshold >= cap)
            assert tried[0] == start
            if 0 < largest < cap:  # the answer is proven by a trial on each side of it
                assert largest in tried and largest + 1 in tried
            error = abs(start - max(threshold, 1)) + 1  # trials grow with log2 of the start's error
            assert len(tried) <= 2 * error.bit_length() + 2, (threshold, start, tried)


def test_a_right_prediction_costs_two_trials():
    tried: list[int] = []
    largest, _ = gallop(lambda b: tried.append(b) or b <= 11, 11, 1024)
    assert largest == 11 and tried == [11, 12]
    tried.clear()
    assert gallop(lambda b: tried.append(b) or b <= 11, 12, 1024)[0] == 11 and tried == [12, 11]
