"""A script that never calls paradvisor.runtime.report(): it still gets a run directory, status and logs. With
NO_REPORT_SLEEP_S it works that long first without a record (it must not be called hung)."""

import os
import time

time.sleep(float(os.environ.get("NO_REPORT_SLEEP_S", "0")))
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} ran, plan at {os.environ['PARADVISOR_PLAN']}")
