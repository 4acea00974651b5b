"""Tensor-parallel collectives beside the GEMMs, as Transformer Engine's userbuffers run them for Megatron-Core
(`--tp-comm-overlap`; estimate/tp_overlap.py): what hides, what shows, and who takes it."""

from pathlib import Path

import pytest

from paradvisor.estimate import steptime, tp_overlap
from paradvisor.estimate.steptime import Device, LayerShape
from paradvisor.plan.engines import ENGINES
from tests.support.readme_table import mcore_and_variant

REPO = Path(__file__).resolve().parents[2]
H100 = Device(peak=989.4e12, mem_bw=3.35e12, arch="hopper", clock=steptime.SUSTAINED_CLOCK["hopper"])
NVLINK = 450e9 * steptime.NVLINK_EFF


def _layer(h: int, heads: int) -> LayerShape:
    return LayerShape(hidden=h, heads=heads, kv_heads=heads, head_dim=h // heads, ffn=4 * h, gated=False,
                      causal=True, dropout=False, rms_rope=False)  # fmt: skip


def _tp(overlap: bool, *, sp: bool = True, bw: float = NVLINK, tp: int = 8, h: int = 7168) -> float:
    t = steptime.micro_batch_time(
        _layer(h, h // 128), layers=4, tokens=4096, seq=4096, tp=tp, sp=sp, attention="sdpa", act_bytes=2,
        checkpointing="none", dev=H100, tp_bw=bw, tp_lat=0.0, tp_overlap=overlap,
    )  # fmt: skip
    return t["tp_comm"]


def test_overlap_hides_tp_collectives_beside_large_gemms():
    """A 32B-wide layer at TP 8 over NVLink: each collective is shorter than the GEMM beside it, so what is
    left is the pipelined reduce-scatter's last split and the SMs the overlapping GEMMs give up, well under
    the collectives' own time and above nothing."""
    plain, over = _tp(False), _tp(True)
    assert 0 < over < 0.5 * plain


def test_communication_longer_than_the_gemm_shows():
    """On a link so slow that every collective outlasts its GEMM, overlap saves nothing: all of the
    collectives show (the backward's third one per GEMM pair too, the input's all-gather for wgrad under
    sequence parallelism, Korthikanti et al. 2022 §4.2.2), so it costs at least the waiting collectives."""
    slow = 1e9
    plain, over = _tp(False, bw=slow), _tp(True, bw=slow)
    assert over >= plain
    size = 4096 * 7168 * 2
    c = (8 - 1) / 8 * size / slow  # one all-gather or reduce-scatter
    assert over == pytest.approx(4 * 10 * c, rel=0.05)  # 4 layers x (4 forward + 6 backward) collectives


def test_the_cost_is_the_exposed_split_and_the_lost_sms():
    """Per layer, forward: for each GEMM pair a quarter of a collective (TE's 4 pipeline splits) plus the
    row-parallel GEMM on 16 fewer of the GPU's SMs; backward: both column-parallel GEMMs' dgrad and wgrad on
    16 fewer SMs (bulk overlap); with every collective shorter than its GEMM nothing else shows."""
    shapes = [(4096, 2688, 7168), (4096, 7168, 896), (4096, 3584, 7168), (4096, 7168, 3584)]
    gemm = {s: t for s, t in zip(shapes, (3.0e-4, 2.0e-4, 4.0e-4, 4.0e-4))}
    size = 4096 * 7168 * 2
    c = (8 - 1) / 8 * size / NVLINK
    assert c < 2.0e-4  # shorter than every GEMM here
    fwd, bwd = tp_overlap.exposed(shapes, lambda *s: gemm[s], size, 8, NVLINK, 0.0, "hopper")
    slow = 16 / (132 - 16)
    assert fwd == pytest.approx(2 * c / 4 + slow * (2.0e-4 + 4.0e-4))
    assert bwd == pytest.approx(2 * slow * (3.0e-4 + 4.0e-4))


def test_without_sequence_parallelism_there_is_no_overlap():
    """Megatron-Core's TP overlap works on sequence-parallel layers only: without SP the all-reduces wait."""
    assert _tp(True, sp=False) == _tp(False, sp=False)


def test_only_the_engines_whose_benchmarks_run_it_take_it():
    """Megatron-Core as NVIDIA benchmarks it turns TP overlap on whenever TP > 1 (Megatron-Bridge's performance
    recipes, Megatron-LM's README runs); paradvisor's launcher (DTensor TP) and the 2021-2022 Megatron-LM of
    the validation papers do not."""
    assert ENGINES["mcore"].tp_overlap
    assert not any(ENGINES[e].tp_overlap for e in ("torch", "megatron", "torchtitan", "llama3"))


def test_a_megatron_core_plan_takes_the_overlap_through_the_estimate(monkeypatch):
    """End to end (plan.evaluate -> plan.gpu_stage -> steptime): a row of Megatron-LM's README table (32B GPT,
    TP 8 with SP on 384 H100) under `mcore` spends less on TP than the same engine without the overlap."""
    over, waits = mcore_and_variant(monkeypatch, "32B", tp_overlap=False)
    assert 0 < over["tp_comm"] < 0.5 * waits["tp_comm"]
    assert over["compute"] == waits["compute"]
