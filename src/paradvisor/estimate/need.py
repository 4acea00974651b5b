"""`MemoryNeed`: what one plan needs of a GPU's memory, by term, on its worst pipeline stage (or the stage asked
for), and of the host's RAM for offload. `plan/evaluate.py` `memory_need` makes it; the estimate, `validate`,
the prediction a run carries, `probe` and the re-plan after an out-of-memory failure read it."""

from __future__ import annotations

from paradvisor.record import record


@record(frozen=True)
class MemoryNeed:
    terms: dict[
        str, float
    ]  # bytes per GPU by term (params, grads, optimizer, ..., overhead: estimate/memory.py)
    total: float  # bytes alive at the peak (`phase`): not every term is alive at once
    psi: float  # parameters the stage holds
    phase: str  # the part of the step where the peak falls
    shard: int  # ranks the model states are sharded over
    cpu: float  # host bytes per rank for offload
    activation_source: str  # where the activation figures came from (traced, formula, analytic)
    stages: tuple[dict, ...] | None = None  # with every_stage: each pipeline rank's total and terms

    @classmethod
    def of(cls, terms, total, psi, phase, shard, cpu, activation_source, stages) -> MemoryNeed:
        """MemoryNeed(...) of every field, made without the frozen dataclass's __init__ (one object.__setattr__
        per field): the search makes one per candidate; the same object, field for field."""
        need = object.__new__(cls)
        need.__dict__.update(
            terms=terms,
            total=total,
            psi=psi,
            phase=phase,
            shard=shard,
            cpu=cpu,
            activation_source=activation_source,
            stages=stages,
        )
        return need

    @property
    def model_states(self) -> float:
        """Parameters, gradients and optimizer state: what a rank holds across steps."""
        return self.terms["params"] + self.terms["grads"] + self.terms["optimizer"]

    @property
    def allocated(self) -> float:
        """The peak less the framework's overhead outside torch's allocator."""
        return self.total - self.terms["overhead"]

    def to_doc(self) -> dict:
        doc = {
            "terms": self.terms,
            "total": self.total,
            "psi": self.psi,
            "phase": self.phase,
            "shard": self.shard,
            "cpu": self.cpu,
            "activation_source": self.activation_source,
        }
        if self.stages is not None:
            doc["stages"] = list(self.stages)
        return doc
