"""The training engines the estimate models, and how each holds and moves a model where they differ in what
the estimate counts (ModelFacts.engine names one; ModelFacts.traits reads it)."""

from __future__ import annotations

from paradvisor.record import record


@record(frozen=True)
class EngineTraits:
    """How an engine holds and moves a model, where engines differ in what the estimate counts."""

    weights16: bool  # 16-bit weights, fp32 main gradients and master copy (no autocast weight copies)
    vocab_parallel: bool  # embedding and LM head split over TP (logits and loss too)
    dp_overlap: bool  # the gradient all-reduce overlaps the backward pass
    reshard_each_micro: bool  # FSDP gathers the parameters again for every micro-batch
    fused: bool = True  # fused memory-bound kernels; selective: what selective checkpointing recomputes;
    selective: str = "attention-core"  # attention: the flash kernel SDPA runs (estimate/steptime.FLASH_PEAK)
    attention: str = "flash"
    block_memory: str = "traced"  # saved tensors: "traced" (its code), "mcore" (mcore_terms)
    tp_overlap: bool = False  # TP collectives beside the GEMMs as TE's userbuffers run them (tp_overlap.py)
    gather_forward: bool = False  # ZeRO-1/2's weight all-gather beside the next forward (plan/dp_overlap.py)
    p2p_overlap: bool = False  # interleaved pipeline sends beside the other chunks' compute (evaluate.py)
    # the attention kernel is given a sliding window and skips the blocks outside it; False: transformers'
    # explicit SDPA mask, every key block computed (flash.core_time)
    window_kernel: bool = True


# "torch": paradvisor's launcher (Hugging Face models run eagerly). "megatron": Megatron-LM of Narayanan 2021
# and Korthikanti 2022 (gradient all-reduce after backward). "torchtitan", as benchmarked: eager (-compile:
# fused), loss parallel, FSDP kept across a pipeline's micro-batches, per-op SAC, FA2 in SDPA (torch#142132).
# "llama3": Dubey et al. 2024 §3.3.2. "mcore": Megatron-Core as NVIDIA benchmarks it. "llm-foundry": MPT runs.
ENGINES = {
    "torch": EngineTraits(False, False, True, True, False, window_kernel=False),
    "megatron": EngineTraits(True, True, False, False),
    "torchtitan": EngineTraits(False, True, True, True, False, "every-other-mm", "fa2"),
    "torchtitan-compile": EngineTraits(False, True, True, True, True, "every-other-mm", "fa2"),
    "llama3": EngineTraits(False, True, True, False, block_memory="mcore"),
    "mcore": EngineTraits(
        True, True, True, False, block_memory="mcore", tp_overlap=True, gather_forward=True, p2p_overlap=True
    ),
    "llm-foundry": EngineTraits(False, True, True, True, True, "every-other-mm", "fa1-triton"),
}
