"""Write tests/data/rankings.json: the cost model's ranking on every shipped example cluster.

Generated from the code *before* clusters were represented by node groups (issue 15): main at
c10d9eb (capability table, 1F1B needing a micro-batch per stage) with this script copied into an
export of it, so that tests/advice/test_scale.py checks the grouped representation ranks the same plans with
the same figures. Run: PYTHONPATH=src python tests/data/make_rankings.py (only to record a deliberate
change to the cost model or the strategy space).

Re-recorded once since, with node groups in place, when issue 13 deliberately changed the cost model
(traced activations, DeepSpeed's own accounting): the grouped representation had matched the per-pair
code's record up to that merge (main 523b7f4, the last commit before it), and the grouped links are still
checked against the per-pair and per-rank algorithms by tests/advice/test_scale.py's property tests.
Re-recorded again when the loss head's backward gradients became a memory term (`transient`, measured
on an H100 by experiments/gpu_check.py): a deliberate change of the memory model.
Re-recorded for issue 31: the operation-level GPU step-time model (estimate/steptime.py), pipeline stages as
Megatron/torchtitan lay them out (tied embedding copy on the last stage, interleaved 1F1B and the balanced
split in the search space), and a pipeline link shared by at most a node's GPUs.
Re-recorded for issue 31 items 5-6: a flash-attention core's backward at 2.5x its forward (FlashAttention-2);
every case keeps its top-5 order, the 271 plans present in both records move by +0.0% to +2.4%.
Re-recorded when paradvisor's own engine ("torch") became eager in the GPU step-time model (Hugging Face models
run RMSNorm, rotary and SwiGLU op by op, q/k/v apart: measured on an H100, docs/accuracy.md): 6 of 11 cases keep
their top-5 order (two-servers BERT and GPT-2, geo-four-nodes, the 4x8 H100 cases reorder near-ties), the 259
plans present in both records move by -0.3% to +27.7%.
Re-recorded when GEMMs were timed by their shape (estimate/steptime.gemm_time: the math plus the operand and
output bytes plus a launch, the backward at its dgrad/wgrad shapes, measured on 71 GEMMs of an H100): 8 of 11
cases keep their top-5 order (two-servers GPT-2, 2080 Ti GPT-2 large and the 4x8 H100 Llama-2-70B reorder
near-ties), the 253 plans present in both records move by -27.4% (gpt-mini on the A30/Titan Xp pair: a slow GPU's
small GEMMs are no longer charged the size factor of a fast one's) to +10.5%.
Re-recorded when Hopper and Blackwell tensor math took the SM clock those GPUs hold through a training run
(estimate/steptime.SUSTAINED_CLOCK: 1575 of 1980 MHz on Hopper, public measurements): 10 of 11 cases keep their
top-5 order (the 4x8 H100 Llama-2-70B reorders near-ties), the 269 plans present in both records move by +0.0%
(the A30/Titan Xp, 2080 Ti and two-server cases) to +20.7%.
Re-recorded when a flash kernel's rate took its head dim (estimate/flash.py FLASH_HEAD_DIM: 0.80 of the
head-dim-128 rate at 64 for FA3 / cuDNN on Hopper and Blackwell, 0.89 for FA2 and on older GPUs, from the
FlashAttention-3 paper's figures): every case keeps its top-5 order, the ranked plans move by +0.0% to +0.9%
(the head-dim-64 models: BERT, GPT-2, gpt-mini, llama-150m).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["PARADVISOR_CALIBRATION"] = "none"
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from paradvisor.hardware.cluster import load_cluster  # noqa: E402
from paradvisor.model.load import load_profile  # noqa: E402
from paradvisor.plan.evaluate import evaluate  # noqa: E402
from paradvisor.plan.facts import ModelFacts, Topology  # noqa: E402
from paradvisor.plan.search import choose_precision  # noqa: E402
from paradvisor.plan.space import candidates  # noqa: E402
from paradvisor.spec.plan import Workload  # noqa: E402

TOP = 25
CASES = [  # (cluster file, model, seq_len, global batch per GPU)
    ("paper000-two-servers.toml", "bert-base-uncased", 512, 8),
    ("paper000-two-servers.toml", "gpt2-medium", 1024, 4),
    ("paper001-a30-titanxp.toml", "gpt-mini", 256, 8),
    ("paper001-a30-titanxp.toml", "llama-150m", 1024, 4),
    ("paper003-geo-four-nodes.toml", "llama-150m", 1024, 4),
    ("paper004-vgg-2080ti.toml", "vgg16", 1, 8),
    ("paper004-vgg-2080ti.toml", "gpt2-large", 1024, 2),
    ("h100-8x-nvlink.toml", "llama-2-70b", 4096, 8),
    ("h100-8x-nvlink.toml", "llama-2-13b", 4096, 4),
    ("h100-4x8-infiniband.toml", "llama-2-70b", 4096, 8),
    ("h100-4x8-infiniband.toml", "llama-3-8b", 8192, 4),
]


def row(e) -> dict:
    p = e.plan
    return {
        "plan": {k: v for k, v in p.to_dict().items() if k not in ("nodes",)},
        "label": p.label(),
        "step_time": float(f"{e.step_time:.9g}"),
        "memory": round(e.memory_total),
        "fits": e.fits,
    }


def ranking(cluster_file: str, model: str, seq: int, per_gpu: int) -> dict:
    cluster = load_cluster(REPO / "examples" / "clusters" / cluster_file)
    profile = load_profile(model)
    wl = Workload(model=model, seq_len=seq, global_batch=per_gpu * cluster.gpu_count)
    precision = choose_precision(cluster, wl.precision)
    mf, topo = ModelFacts.of(profile), Topology.of(cluster)
    est = [evaluate(mf, topo, wl, p, precision, 0.10) for p in candidates(mf, topo, wl, precision)]
    feasible = sorted((e for e in est if e.fits), key=lambda e: (e.score, e.memory_total))
    return {
        "cluster": cluster_file,
        "model": model,
        "seq_len": seq,
        "global_batch": wl.global_batch,
        "candidates": len(est),
        "feasible": len(feasible),
        "top": [row(e) for e in feasible[:TOP]],
        "dp_links": {
            f"{tp},{dp},{pp}": list(topo.dp_link(tp, dp, pp))
            for tp in (1, 2, 4)
            for pp in (1, 2)
            for dp in [topo.world // (tp * pp)]
            if topo.world % (tp * pp) == 0 and tp <= topo.min_gpus_per_node
        },
        "pp_links": {
            f"{tp},{dp},{pp}": list(topo.pp_link(tp, dp, pp))
            for tp in (1, 2)
            for pp in (2, 4)
            for dp in [topo.world // (tp * pp)]
            if topo.world % (tp * pp) == 0 and tp <= topo.min_gpus_per_node and dp >= 1
        },
    }


if __name__ == "__main__":
    out = [ranking(*c) for c in CASES]
    path = Path(__file__).with_name("rankings.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}: {sum(len(c['top']) for c in out)} ranked plans over {len(out)} cases")
