"""`python tests/support/sky_task_check.py skypilot.yaml`, run by the SkyPilot test environment's Python
(.venv/skypilot, requirements/skypilot-lock.txt): SkyPilot's own `sky.Task.from_yaml` reads the task (offline,
no cloud credentials) and prints what it understood as one JSON line after `SKYTASK `."""

import json
import sys

import sky

task = sky.Task.from_yaml(sys.argv[1])
print(
    "SKYTASK "
    + json.dumps(
        {
            "name": task.name,
            "num_nodes": task.num_nodes,
            "cpus": sorted(str(r.cpus) for r in task.resources),
            "workdir": task.workdir,
            "setup": task.setup,
            "run": task.run,
            "envs": dict(task.envs),
        }
    )
)
