"""Python's cyclic garbage collector, paused while the planner builds what it returns.

The search makes tens of thousands of small objects (a plan, its estimate and their dicts per candidate) and
keeps every one of them until it returns: each automatic collection on the way walks them all and frees
nothing. Measured on llama-2-70b over 32 H100 (2,482 candidates), those passes were about a sixth of the
command's CPU time (gc.callbacks). Paused, the collector runs again as soon as the search is done, with what
the pause made counted as old (the oldest generation, as if it had survived collections): the first young
collection after the pause would otherwise walk every one of those objects (7 ms after the 70B search) to
free nothing. Cycles among them are still freed by the next full collection.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside (a collector already off stays off; one on is turned on again)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            _age()
            gc.enable()


def freeze() -> None:
    """`gc.freeze()` for paradvisor's own callers (the TUI's start, the command's exit): what exists now is not
    walked again. The pause leaves ageing alone from then on (an unfreeze would thaw these too)."""
    global _frozen
    _frozen = True
    gc.freeze()


_frozen = False  # whether freeze() ran in this process


def _age() -> None:
    """Move every tracked object into the oldest generation without walking them (freeze, then unfreeze: both
    splice lists); not once freeze() has frozen objects, which an unfreeze would thaw. Known from freeze()'s
    flag, never from gc.get_freeze_count(): that counts the frozen list one object at a time, with the GIL
    held (CPython 3.11 gc_list_size): about 1 ms per 100,000 frozen objects on every ranking of a TUI session,
    229 ms in a test worker that had run the TUI's tests (1.8 million frozen, scattered in memory)."""
    if not _frozen:
        gc.freeze()
        gc.unfreeze()
