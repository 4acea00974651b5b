"""A check of the step-time model on a public table that rows.toml does not hold and nothing is tuned on:
NVIDIA NeMo's performance summary for the NeMo 24.07 container (NVIDIA/NeMo
`docs/source/performance/performance_summary.md`, "Pretraining", commits 4c73f77..8e3d65d, 2024-08/09): FP8
pre-training on DGX H100, each row with its GPU count, global and micro batch, sequence, TP, PP, CP, virtual
stages and measured tokens/s per GPU.

    python experiments/validation/nemo_perf.py

Rows used: the GPT-3 and Llama rows, whose shapes are public (Llama: the catalogue's config.json; GPT-3 5B /
20B / 175B: NeMo's `GPTConfig5B` / `GPTConfig20B` / `GPTConfig175B`, GeLU MLP 4h, learned positions, tied
embeddings, the GPT-2 vocabulary padded by NeMo to a multiple of 128 x TP). Left out: the Nemotron rows
(Nemotron-8B and -22B have no published shape; Nemotron-340B's squared-ReLU MLP is no family the catalogue
builds). The NeMo 24.07 runs are Megatron-Core with Transformer Engine: the `mcore` engine, the distributed
optimizer, sequence parallelism with TP, no activation recompute (the table states none). Assumed where the
table is silent: FP8 as the estimate models it, per-tensor current scaling (24.07 ran TE's delayed scaling,
whose casts skip the separate amax pass: the estimate's casts are ~1/3 more bytes than those runs moved).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src"))

import validate as V

from paradvisor.model.load import load_profile
from paradvisor.model.profile import ModelProfile
from paradvisor.spec.plan import Plan

ENGINE = "mcore"
DGX_H100 = V.load_rows()["clusters"]["dgx-h100"]
GPT3 = {
    "gpt3-5b": (24, 4096, 32),
    "gpt3-20b": (44, 6144, 48),
    "gpt3-175b": (96, 12288, 96),
}  # layers, h, heads
GPT2_VOCAB = 50257
# model, GPUs, global batch, micro-batch, sequence, TP, PP, CP, virtual stages, tokens/s/GPU
TABLE = """gpt3-5b 64 2048 4 2048 1 1 1 1 22521
gpt3-20b 64 256 2 2048 2 1 1 1 5851
gpt3-175b 128 256 1 2048 4 8 1 6 726
gpt3-175b 512 2048 2 2048 4 8 1 6 782
llama-2-7b 8 128 1 4096 1 1 1 1 16847
llama-2-13b 16 128 1 4096 1 4 1 10 8646
llama-2-70b 64 128 1 4096 4 4 1 20 1707
llama-3-8b 8 128 1 8192 1 1 2 1 12036
llama-3-70b 64 128 1 8192 4 4 2 5 1533"""


def profile(name: str, tp: int, seq: int) -> ModelProfile:
    """The catalogue's model, or NeMo's GPT-3 shape with its padded vocabulary."""
    if name not in GPT3:
        return load_profile(name)
    layers, h, heads = GPT3[name]
    pad = 128 * tp
    cfg = {"n_layer": layers, "n_embd": h, "n_head": heads, "vocab_size": -(-GPT2_VOCAB // pad) * pad,
           "n_positions": seq, "tie_word_embeddings": True}  # fmt: skip
    return V.built_profile(f"nemo-{name}", cfg)


def estimate(line: str):
    name, *nums, _ = line.split()
    gpus, batch, mb, seq, tp, pp, cp, v = map(int, nums)
    dp = gpus // (tp * pp * cp)
    plan = Plan(dp=dp, tp=tp, pp=pp, cp=cp, sharding="zero1", micro_batch=mb, grad_accum=batch // (dp * mb),
                checkpointing="none", precision="fp8", sequence_parallel=tp > 1,
                pp_schedule="interleaved1f1b" if v > 1 else "1f1b", pp_virtual_stages=v)  # fmt: skip
    return V.estimate_plan(profile(name, tp, seq), ENGINE, DGX_H100, gpus, plan, seq=seq, global_batch=batch)[
        0
    ]


def measured(line: str) -> float:
    """The row's step seconds from its tokens/s per GPU."""
    _, gpus, batch, _, seq, *_, tokens = line.split()
    return int(batch) * int(seq) / (float(tokens) * int(gpus))


def errors(out=print) -> list[float]:
    """Predicted against measured per row, printed through `out`."""
    errs = []
    for line in TABLE.splitlines():
        name, gpus = line.split()[:2]
        err, text = V.check_line(name, gpus, measured(line), estimate(line))
        errs.append(err)
        out(text)
    return errs


def main() -> int:
    print("NeMo 24.07 performance summary, FP8 pre-training on DGX H100")
    print(V.check_summary(errors()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
