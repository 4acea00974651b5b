"""DiLoCo's workers as the launcher forms them (plan/diloco.diloco_workers) and what a DiLoCo run is predicted to
do (monitor/predict.estimate_for): a rank's memory and steps are its worker's inner plan, with no all-reduce over
all ranks each step."""

from __future__ import annotations

from dataclasses import replace

from paradvisor.hardware import catalog
from paradvisor.monitor.predict import estimate_for
from paradvisor.plan.diloco import diloco_workers
from paradvisor.plan.facts import Topology
from paradvisor.spec.plan import NodeAllocation, Plan
from paradvisor.spec.preset import load_preset
from tests.conftest import REPO

PRESET = REPO / "presets" / "llama150m-diloco-local-steps.toml"


def _alloc(name: str, gpus: int) -> NodeAllocation:
    return NodeAllocation(node=name, gpus=gpus, tflops=1, relative_speed=1, batch_per_gpu=1, data_share=0.5,
                          local_steps=4)  # fmt: skip


def test_workers_are_cut_from_the_machines_in_rank_order():
    h100 = catalog.gpu("H100 SXM")
    topo = Topology.uniform(h100, 8, catalog.link(h100.intra_link))
    plan = Plan(dp=8, diloco=True, local_steps=4, nodes=(_alloc("a", 2), _alloc("b", 6)))
    workers, link = diloco_workers(plan, topo)
    assert [(w.name, w.gpu_count) for w in workers] == [("a", 2), ("b", 6)]
    assert link == topo.cluster.online_nodes[0].intra_link  # one machine: the outer sync stays on it
    alone, _ = diloco_workers(replace(plan, nodes=()), topo)
    assert [w.name for w in alone] == [f"rank{r}" for r in range(8)]  # the launcher's worker per rank


def test_a_diloco_run_is_predicted_as_its_slowest_workers_inner_step():
    preset = load_preset(PRESET)
    # the built-in model: its activations are stored, so nothing is traced
    preset = replace(preset, train=replace(preset.train, model_overrides={}))
    r = estimate_for(preset, on_gpu=True, gpu_name="H100 SXM")
    assert r.plan.dp == 1 and not r.plan.diloco  # each of the preset's two workers holds one rank
    assert r.workload.global_batch == preset.plan.micro_batch * preset.plan.grad_accum
    assert not r.estimate.time.get("dp_comm_total")  # no gradient all-reduce over both ranks every step
    ddp = estimate_for(replace(preset, plan=replace(preset.plan, diloco=False, nodes=())), on_gpu=True,
                       gpu_name="H100 SXM")  # fmt: skip
    assert ddp.estimate.time.get("dp_comm_total", 0) > 0
