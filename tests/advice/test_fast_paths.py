"""The built-in answer's fast paths (issue 32, goal 2) make what the slow ones made: a plan made without its
dataclass __init__, a MemoryNeed, the package data's folder; the collector's pause ages what it made instead of
walking it; and a recommend whose plans fit does not load what only other requests need."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from importlib import resources

import pytest

from paradvisor.estimate.need import MemoryNeed
from paradvisor.shipped import package_files
from paradvisor.spec.plan import Plan, changed_plan, new_plan
from tests.conftest import REPO


def test_new_plan_and_changed_plan_make_the_dataclass_s_own_plans():
    kw = {
        "dp": 4,
        "tp": 8,
        "pp": 2,
        "sharding": "fsdp",
        "micro_batch": 2,
        "grad_accum": 4,
        "checkpointing": "full",
        "sequence_parallel": True,
        "pp_schedule": "interleaved1f1b",
        "pp_virtual_stages": 2,
    }
    made, slow = new_plan(**kw), Plan(**kw)
    assert made == slow and hash(made) == hash(slow) and repr(made) == repr(slow) and vars(made) == vars(slow)
    assert new_plan() == Plan() and new_plan().nodes == () and new_plan().rank_batches == ()
    changed = changed_plan(made, checkpointing="none", offload="optimizer")
    assert changed == dataclasses.replace(slow, checkpointing="none", offload="optimizer")
    assert vars(changed) == vars(dataclasses.replace(slow, checkpointing="none", offload="optimizer"))
    assert made.checkpointing == "full" and made.to_dict() == slow.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.dp = 1  # type: ignore[misc]


def test_memory_need_of_is_its_constructor():
    args = ({"params": 1.0, "overhead": 2.0}, 3.0, 4, "forward/backward", 5, 6.0, "formula", None)
    fast, slow = MemoryNeed.of(*args), MemoryNeed(*args)
    assert fast == slow and vars(fast) == vars(slow) and fast.to_doc() == slow.to_doc()


@pytest.mark.parametrize(
    "package", ["paradvisor", "paradvisor.hardware", "paradvisor.model", "paradvisor.rules"]
)
def test_package_files_is_what_importlib_resources_gives(package):
    assert package_files(package) == resources.files(package)


def run_alone(probe: str) -> None:
    """`probe` (Python source, asserting what it checks) run in a fresh interpreter: what the collector has frozen
    or aged in the test worker is other tests' history."""
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_the_pause_ages_what_it_made_so_the_next_young_collection_has_nothing_to_walk():
    """In a process of its own: whether objects are frozen already (the TUI's tests freeze their start, and the
    pause then leaves ageing alone) is the test worker's history, not this test's."""
    probe = (
        "import gc\n"
        "from paradvisor import collector\n"
        "ran = []\n"
        "gc.collect()\n"
        "gc.callbacks.append(lambda phase, info: ran.append(info['generation']) if phase == 'stop' else None)\n"
        "with collector.paused():\n"
        "    made = [[i] for i in range(5_000)]  # more than a young generation's threshold\n"
        "few = [[i] for i in range(50)]  # a young collection would start here were they still young\n"
        "gc.callbacks.clear()\n"
        "assert ran == [] and gc.isenabled() and len(made) + len(few) == 5_050, ran\n"
    )
    run_alone(probe)


def test_the_pause_leaves_frozen_objects_frozen():
    """In a process of its own: in the test worker a frozen object freed meanwhile (another thread's, another
    test's) lowers the count without anything being thawed."""
    probe = (
        "import gc\n"
        "from paradvisor import collector\n"
        "gc.collect()\n"
        "collector.freeze()  # as the TUI freezes what its start made (tui/startup.py)\n"
        "frozen = gc.get_freeze_count()\n"
        "with collector.paused():\n"
        "    made = [[i] for i in range(100)]\n"
        "assert gc.get_freeze_count() == frozen and gc.isenabled() and len(made) == 100, (frozen, gc.get_freeze_count())\n"
    )
    run_alone(probe)


def test_the_pause_never_counts_the_frozen_objects():
    """gc.get_freeze_count() walks the frozen list with the GIL held: with a TUI session's 100,000 frozen objects
    every ranking paid for it, and a test worker that had run the TUI's tests (1.8 million) paid 229 ms per
    command (the rule-file fuzz went from 3 s to 41 s). The pause knows what paradvisor froze without counting."""
    probe = (
        "import gc\n"
        "from paradvisor import collector\n"
        "def counted():\n"
        "    raise AssertionError('the pause counted the frozen objects')\n"
        "gc.get_freeze_count = counted\n"
        "for freeze in (False, True):\n"
        "    if freeze:\n"
        "        collector.freeze()\n"
        "    with collector.paused():\n"
        "        made = [[i] for i in range(100)]\n"
        "assert gc.isenabled() and len(made) == 100\n"
    )
    run_alone(probe)


def test_a_recommend_whose_plans_fit_loads_only_what_it_needs():
    cluster = REPO / "examples" / "clusters" / "h100-4x8-infiniband.toml"
    probe = (
        "import sys; from paradvisor.cli import main; "
        f"code = main(['recommend', '--model', 'llama-2-70b', '--cluster', {str(cluster)!r}, '--json']); "
        "never = ('paradvisor.plan.nearest', 'paradvisor.plan.fixes', 'paradvisor.plan.hetero', "
        "'importlib.resources', 'difflib'); "
        "sys.stderr.write(f'{code} {[m for m in never if m in sys.modules]}')"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PARADVISOR_CALIBRATION": "none"}
    res = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.stderr.strip().splitlines()[-1] == "0 []", res.stderr[-2000:]
