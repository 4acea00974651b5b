"""Rank 1 crashes at step 2 (the same diagnosis as a failed paradvisor run); rank 0 waits for it."""

import os
import sys
import time

from paradvisor import runtime

rank = int(os.environ["RANK"])
for step in (1, 2):
    runtime.report(step=step, loss=1.0 / step)
    if rank == 1 and step == 2:
        print("about to fail", file=sys.stderr, flush=True)
        raise ValueError("the user's code failed on purpose")
time.sleep(60)  # stopped by the launcher when rank 1 fails
