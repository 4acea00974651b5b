"""A check of the step-time model on a public table that rows.toml does not hold and nothing is tuned on:
Megatron-LM's weak-scaling table (NVIDIA/Megatron-LM README.md, "Performance Benchmarking",
`images/model_table.png`, Megatron-Core r0.8.0 per `images/weak_scaling.png`): GPT models of 1.7B-462B on
48-6,144 H100 GPUs, TP 1-8, PP 1-16, data-parallel 48, sequence 4,096, vocabulary 131,072, per-GPU model
teraFLOP/s and MFU.

    python experiments/validation/megatron_readme.py

The README names the overlaps the runs used: `--overlap-grad-reduce`, `--overlap-param-gather`,
`--tp-comm-overlap`; the estimate's `mcore` engine runs Megatron-Core that way (estimate/tp_overlap.py for the
TP part). The table gives the model shape, the parallel degrees and the global batch; the shapes are GPT blocks
(GeLU MLP 4h, one K/V head per query head, untied embeddings: with the table's vocabulary they give its model
sizes). Not given, so assumed: micro-batch 1, sequence parallelism with TP, no activation recompute, a
distributed optimizer, DGX H100 nodes with 8 x 400 Gb/s InfiniBand (Eos), and the pipeline schedule: each row is
printed with plain 1F1B and with the most interleaved split (the largest virtual stage count up to 8 that
divides a stage's layers), which bracket what an unstated `--num-layers-per-virtual-pipeline-stage` gives.
The measured step is the step's FLOPs as Megatron-Core r0.8.0 counts them (`training.num_floating_point_operations`:
72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) for these blocks) over the per-GPU teraFLOP/s times the GPUs.
"""

import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src"))

import validate as V

from paradvisor.spec.plan import Plan

SEQ, VOCAB = 4096, 131072
ENGINE = "mcore"  # Megatron-Core as NVIDIA benchmarks it (plan.facts.ENGINES)
DGX_H100 = V.load_rows()["clusters"]["dgx-h100"]  # Eos: 8 H100 SXM per node, 8 x 400 Gb/s InfiniBand
# model, heads, hidden, layers, TP, PP, GPUs, global batch, per-GPU teraFLOP/s (data-parallel 48 throughout)
TABLE = """1.7B 16 2048 24 1 1 48 192 408.8
7.1B 32 4096 30 2 1 96 192 465.9
16B 48 6144 32 4 1 192 192 489.1
32B 56 7168 48 8 1 384 192 459.6
70B 64 8192 84 8 2 768 384 419.7
119B 80 10240 92 8 4 1536 768 420.5
177B 96 12288 96 8 6 2304 1152 432.8
314B 128 16384 96 8 8 3072 1536 474.4
462B 144 18432 112 8 16 6144 3072 459.9"""


def most_interleaved(layers: int, pp: int) -> int:
    """The largest virtual stage count up to 8 that divides a stage's layers (1 without a pipeline)."""
    per = layers // pp
    return max(v for v in range(1, min(8, per) + 1) if per % v == 0) if pp > 1 else 1


def estimate(line: str, interleaved: bool):
    """paradvisor's estimate of one row of TABLE under ENGINE (plain 1F1B or the most interleaved split)."""
    name, heads, h, layers, tp, pp, gpus, batch, _ = line.split()
    heads, h, layers, tp, pp, gpus, batch = map(int, (heads, h, layers, tp, pp, gpus, batch))
    cfg = {"n_layer": layers, "n_embd": h, "n_head": heads, "vocab_size": VOCAB, "n_positions": SEQ}
    prof = V.built_profile(f"megatron-readme-{name}", cfg | {"tie_word_embeddings": False})
    dp = gpus // (tp * pp)
    v = most_interleaved(layers, pp) if interleaved else 1
    plan = Plan(dp=dp, tp=tp, pp=pp, sharding="zero1", micro_batch=1, grad_accum=batch // dp,
                checkpointing="none", precision="bf16", sequence_parallel=tp > 1,
                pp_schedule="interleaved1f1b" if v > 1 else "1f1b", pp_virtual_stages=v)  # fmt: skip
    return V.estimate_plan(prof, ENGINE, DGX_H100, gpus, plan, seq=SEQ, global_batch=batch)[0]


def measured(line: str) -> float:
    """The row's step seconds: Megatron-Core r0.8.0's FLOPs of the step over the per-GPU rate times the GPUs."""
    _, _, h, layers, _, _, gpus, batch, tflops = line.split()
    h, layers, gpus, batch = map(int, (h, layers, gpus, batch))
    flops = 72 * batch * SEQ * layers * h * h * (1 + SEQ / (6 * h) + VOCAB / (12 * layers * h))
    return flops / (float(tflops) * 1e12 * gpus)


def errors(interleaved: bool, out=print) -> list[float]:
    """Predicted against measured per row (plain 1F1B or the most interleaved split), printed through `out`."""
    errs = []
    for line in TABLE.splitlines():
        e, meas = estimate(line, interleaved), measured(line)
        errs.append(V.pct(e.step_time, meas))
        name, v = line.split()[0], e.plan.pp_virtual_stages
        out(f"  {name:5s} v{v}  meas {meas:7.3f} s  pred {e.step_time:7.3f} s  {errs[-1]:+6.1f}%")
    return errs


def main() -> int:
    for interleaved in (False, True):
        print("plain 1F1B" if not interleaved else "most interleaved (virtual stages up to 8)")
        errs = errors(interleaved)
        mean_abs = statistics.mean(map(abs, errs))
        print(f"  {len(errs)} rows: mean {statistics.mean(errs):+.1f}%, mean abs {mean_abs:.1f}%, max abs "
              f"{max(map(abs, errs)):.1f}%")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
