"""Sliding-window attention in the step time (estimate/flash.core_time): a kernel given the window
attends only the keys inside it; transformers under SDPA hands the window over as an explicit mask once the
sequence reaches it, and the kernel then computes every key block. The window and the layers using it come
from the model's config as its transformers class resolves them (tests/facts/test_families.py)."""

from dataclasses import replace

import pytest

from paradvisor.estimate import steptime
from paradvisor.estimate.flash import core_time
from paradvisor.hardware.cluster import single_node_cluster
from paradvisor.model.load import load_profile
from paradvisor.plan.engines import ENGINES
from paradvisor.plan.facts import ModelFacts, Topology
from paradvisor.plan.gpu_stage import device_and_shape


def _core(sh, bh, seq, dev, mask):
    rate = lambda causal: dev.flash_rate("flash", causal, sh.head_dim)  # noqa: E731
    return core_time(bh, seq, sh.head_dim, sh.causal, (sh.window, sh.window_share, mask), rate)


def _mistral():
    mf = ModelFacts.of(load_profile("mistral-7b"))
    topo = Topology.of(single_node_cluster("H100 SXM", 8))
    return device_and_shape(mf, topo, "bf16", topo.specs[0])


def test_mistral_s_window_reaches_the_step_model():
    _dev, sh = _mistral()
    assert (sh.window, sh.window_share) == (4096, 1.0)
    gemma = ModelFacts.of(load_profile("gemma-2-9b"))
    topo = Topology.of(single_node_cluster("H100 SXM", 8))
    _d, g = device_and_shape(gemma, topo, "bf16", topo.specs[0])
    assert (g.window, g.window_share) == (4096, 0.5)  # 21 of 42 layers local


@pytest.mark.parametrize("seq", [16384, 32768])
def test_a_window_kernel_attends_the_window_and_an_explicit_mask_every_key(seq):
    dev, sh = _mistral()
    bh = 32.0  # one sequence, 32 heads
    none = replace(sh, window=0, window_share=0.0)
    full = _core(none, bh, seq, dev, False)
    skip = _core(sh, bh, seq, dev, False)
    mask = _core(sh, bh, seq, dev, True)
    w = sh.window
    # by hand: 4·s·d FLOPs per query and key; a causal query attends (s+1)/2 keys, a windowed one w - w(w-1)/2s
    keys = w - w * (w - 1) / (2 * seq)
    assert skip == pytest.approx(full * keys / (seq / 2))
    rate = dev.flash_rate("flash", True, sh.head_dim) / dev.flash_rate("flash", False, sh.head_dim)
    assert mask == pytest.approx(full * 2 * rate)  # all s keys at the unmasked rate
    assert skip < full < mask


def test_below_the_window_nothing_changes():
    dev, sh = _mistral()
    none = replace(sh, window=0, window_share=0.0)
    for mask in (False, True):
        assert _core(sh, 32.0, 2048, dev, mask) == _core(none, 32.0, 2048, dev, mask)


def test_the_launcher_s_engine_masks_and_the_others_skip():
    assert ENGINES["torch"].window_kernel is False  # HF under SDPA: masking_utils' explicit mask
    assert all(t.window_kernel for name, t in ENGINES.items() if name != "torch")


def test_a_16k_mistral_step_is_longer_under_the_launcher_than_under_a_window_kernel():
    dev, sh = _mistral()
    kw = dict(layers=32, tokens=16384, seq=16384, tp=1, sp=False, attention="sdpa", act_bytes=2)
    kw |= dict(checkpointing="none", dev=dev)
    none = steptime.micro_batch_time(replace(sh, window=0, window_share=0.0), **kw)
    launcher = steptime.micro_batch_time(sh, **kw, window_mask=True)
    kernel = steptime.micro_batch_time(sh, **kw, window_mask=False)
    assert kernel["forward"] < none["forward"] < launcher["forward"]
    assert kernel["backward"] < none["backward"] < launcher["backward"]


def test_estimate_says_how_the_window_is_run(tmp_path):
    """`paradvisor estimate` names the window and what the launcher makes of it, from the sequence length at
    which transformers turns it into an SDPA mask (the window's own length) on."""
    from tests.conftest import run_cli

    base = ["estimate", "--model", "mistral-7b", "--gpus", "8", "--gpu-type", "H100", "--global-batch", "64"]
    plan = ["--plan", "dp=8,sharding=fsdp,micro_batch=1"]
    short = run_cli(*base, "--seq-len", "4095", *plan)
    at = run_cli(*base, "--seq-len", "4096", *plan)
    assert short.returncode == at.returncode == 0, at.stderr
    assert "sliding window" not in short.stdout
    assert "sliding window (4096 tokens, 32 of 32 layers)" in at.stdout and "every key" in " ".join(
        at.stdout.split()
    )


def test_the_cpu_path_counts_the_masked_windows_whole():
    """estimate/compute.py (calibrated CPUs: the launcher's runs) counts a windowed layer's attention whole
    from seq >= window on, as the GPU model does under the launcher's SDPA mask."""
    from paradvisor.estimate.compute import transformer_flops_per_token

    s = load_profile("mistral-7b").transformer
    flat = replace(s, window=0, window_layers=0)
    kw = dict(layers=32, lm_head=False, checkpointing="none", attention="sdpa")
    attn = 4 * s.heads * s.head_dim * 32  # per token per unit of seq, forward, all layers
    for seq in (4095, 4096, 8192):
        got = transformer_flops_per_token(s, seq=seq, **kw)["forward"]
        base = transformer_flops_per_token(flat, seq=seq, **kw)["forward"]
        assert got - base == pytest.approx(attn * seq / 2 if seq >= 4096 else 0.0)


def test_the_model_command_shows_the_window():
    import json

    from tests.conftest import run_cli

    text = " ".join(run_cli("model", "gemma-2-9b").stdout.split())
    assert "sliding window 4096 on 21 of 42 layers" in text
    doc = json.loads(run_cli("model", "mistral-7b", "--json").stdout)["transformer"]
    assert (doc["window"], doc["window_layers"]) == (4096, 32)
    assert "sliding window" not in run_cli("model", "llama-3-8b").stdout
