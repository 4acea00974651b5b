"""Pipeline stages as Megatron-LM and torchtitan lay them out: one source for the planner, the estimate and
the launcher's stage split (train/stages.py).

- Stages are cut at block boundaries. With `pp_virtual_stages` v > 1 (the interleaved 1F1B schedule) the
  model is cut into pp·v chunks and rank r holds chunks r, r+pp, r+2·pp, ... (the "loop" placement of
  Megatron-LM and torch.distributed.pipelining's ScheduleInterleaved1F1B).
- The embedding lives on the first chunk, the final norm, head and loss on the last; a tied embedding is
  held on both (the last stage keeps a copy and their gradients are summed, as Megatron does).
- `even` split: L/(pp·v) blocks per chunk (Megatron's default; needs the division to be exact).
  `balanced` split: torchtitan's `generate_llm_fqn_per_model_part` with input_weight = output_weight = 1:
  the embedding and the head each count as one block, the L + 2 "effective layers" are spread as evenly as
  possible and the first and last chunks give one block each back (torchtitan#2093; Llama 3's
  405B run took one layer off its first and last stage, Dubey et al. 2024 §3.3.2); when the chunks hold
  one block each, the first holds the embedding alone and the last the head and loss alone.
- In-flight micro-batches whose activations a rank holds at its peak (Narayanan et al. 2021 §2.2;
  Megatron-LM `theoretical_memory_usage.py`): GPipe m; 1F1B min(pp - r, m); interleaved 1F1B
  min(m·v, 2·(pp - r - 1) + (v - 1)·pp + 1) chunks (Megatron's warm-up count + 1), which on rank 0 is
  pp·(1 + (pp-1)/(pp·v)) stages' worth: Megatron's interleaving memory penalty.
- Bubble: (pp - 1)/v micro-batch times of a stage (Narayanan et al. 2021 §2.2.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache


@dataclass(frozen=True)
class Stage:
    """One pipeline rank: its chunks' block counts, whether it holds the embedding / the head, and how many
    of its chunks' micro-batches it keeps in flight at its peak (in units of one micro-batch through all of
    its chunks)."""

    rank: int
    blocks: tuple[int, ...]  # blocks per chunk this rank holds, in chunk order
    first: bool
    last: bool
    inflight: float

    @cached_property  # (frozen: the search reads it for every candidate that shares the stage)
    def layers(self) -> int:
        return sum(self.blocks)


def chunk_blocks(num_layers: int, chunks: int, split: str = "even") -> list[int]:
    """Blocks per chunk, in model order, for `chunks` = pp·v chunks."""
    if chunks <= 1:
        return [num_layers]
    if split == "balanced":
        eff = num_layers + 2  # the embedding and the head count as one block each (torchtitan's weights)
        per, extra = divmod(eff, chunks)
        sizes = [per + (1 if i < extra else 0) for i in range(chunks)]
        sizes[0] -= 1
        sizes[-1] -= 1
        return sizes
    per, extra = divmod(num_layers, chunks)
    return [per + (1 if i < extra else 0) for i in range(chunks)]


def split_problem(num_layers: int, pp: int, v: int, split: str) -> str | None:
    """Why `num_layers` blocks cannot be cut into pp·v chunks this way (None: they can)."""
    chunks = pp * v
    if pp > num_layers:
        return f"pp {pp} is above the model's {num_layers} layers"
    if split == "even" and num_layers % chunks:
        if v > 1 and num_layers % pp == 0:  # else pp itself does not divide them: said below
            return (
                f"pp_virtual_stages {v} does not divide the {num_layers // pp} layers per stage "
                f"({num_layers} layers over pp {pp})"
            )
        return f'pp {pp} does not divide the model\'s {num_layers} layers (pp_split = "balanced" allows it)'
    if split == "balanced" and not _balanced_ok(chunk_blocks(num_layers, chunks, split), v):
        return f"{num_layers} layers leave a chunk without a block when cut into {chunks} balanced chunks"
    if chunks > num_layers + (2 if split == "balanced" and v > 1 else 0):
        return f"pp x pp_virtual_stages = {chunks} chunks is more than the model's {num_layers} layers"
    return None


def _balanced_ok(sizes: list[int], v: int) -> bool:
    """Every chunk holds a block, but under interleaving the first and the last may hold only the embedding
    / only the head and loss (Llama 3's layout, Dubey et al. 2024 §3.3.2; torchtitan's
    generate_llm_fqn_per_model_part gives such a chunk ["tok_embeddings"] or ["norm", "output"] alone):
    their rank still runs its other chunks' blocks."""
    edges = 0 if v > 1 else 1
    return min(sizes[1:-1], default=1) >= 1 and min(sizes[0], sizes[-1]) >= edges


def bounds(num_layers: int, pp: int, v: int = 1, split: str = "even") -> list[tuple[int, int]]:
    """[lo, hi) block range of every chunk, in model order (chunk c runs on rank c % pp)."""
    out, lo = [], 0
    for n in chunk_blocks(num_layers, pp * v, split):
        out.append((lo, lo + n))
        lo += n
    return out


def rank_chunks(pp: int, v: int, rank: int) -> list[int]:
    """The chunks (virtual stages) rank `rank` holds: rank, rank + pp, ... (loop placement)."""
    return list(range(rank, pp * v, pp))


def inflight(schedule: str, pp: int, v: int, m: int, rank: int) -> float:
    """Micro-batches' worth of this rank's activations alive at its peak (see the module docstring)."""
    if pp <= 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved1f1b" and v > 1:
        chunks = min(m * v, 2 * (pp - rank - 1) + (v - 1) * pp + 1)
        return chunks / v
    return float(min(pp - rank, m))


def bubble_fraction(schedule: str, pp: int, v: int, m: int) -> float:
    """Idle share of the pipelined part: (p-1)/v over m + (p-1)/v micro-batch times."""
    if pp <= 1:
        return 0.0
    b = (pp - 1) / (v if schedule == "interleaved1f1b" else 1)
    return b / (m + b)


@lru_cache(maxsize=4096)
def layout(num_layers: int, pp: int, v: int, split: str, schedule: str, m: int) -> tuple[Stage, ...]:
    """Every pipeline rank's stage (cached: the search asks for the same few layouts many times)."""
    sizes = chunk_blocks(num_layers, pp * v, split)
    last_chunk = pp * v - 1
    out = []
    for r in range(pp):
        chunks = rank_chunks(pp, v, r)
        out.append(
            Stage(
                rank=r,
                blocks=tuple(sizes[c] for c in chunks),
                first=0 in chunks,
                last=last_chunk in chunks,
                inflight=inflight(schedule, pp, v, m, r),
            )
        )
    return tuple(out)
