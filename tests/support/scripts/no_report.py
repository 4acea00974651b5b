"""A script that never calls paradvisor.runtime.report(): it still gets a run directory, status and logs."""

import os

print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} ran, plan at {os.environ['PARADVISOR_PLAN']}")
