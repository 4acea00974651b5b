"""`StepRecord`: one `step` line of metrics.jsonl, the type the writers (the trainer's loops, the user's code
through `runtime.report`) and the readers (`rundir/metrics.py` and everything above it) share.

Its fields are what the readers use, with their types; the tolerant reader's key sets (`rundir/metrics.py`
`REQUIRED`, `OPTIONAL`) are derived from them, so a field added here is checked the moment it exists. What
only people and TensorBoard read (the learning rate, the strategy, tokens per second, the gradient norm, ...)
rides along in `extra`, written as given (null included). `to_doc()` is the line the writer appends (the
writer adds the rank, node and time), its keys in the order the writer gave them; `from_doc()` reads a line
the tolerant reader accepted."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from paradvisor.typed import WHOLE, document_types

REQUIRED = {"required": True}  # field metadata: a line without it is skipped (the writer fills it in)


@dataclass(frozen=True)
class StepRecord:
    step: int
    step_time_s: float  # this rank's time for the step
    rank: int | None = field(default=None, metadata=REQUIRED)
    node: int | None = None  # the node (its index in the launch) the rank runs on
    time: float | None = None  # when the line was written (seconds since the epoch)
    world_size: int | None = None
    total_steps: int | None = None  # the user's own code says how many steps it runs
    loss: float | None = None  # may be NaN: a diverged loss is news
    samples_per_s: float | None = None
    sync_wait_s: float | None = None
    round: int | None = None  # DiLoCo's outer round
    local_steps: int | None = None
    mem_model_state_bytes: float | None = None
    mem_params_bytes: float | None = None
    mem_grads_bytes: float | None = None
    mem_optimizer_bytes: float | None = None
    mem_step_grads_bytes: float | None = None
    cuda_max_allocated_bytes: float | None = None
    cuda_max_reserved_bytes: float | None = None
    activation_bytes: float | None = None
    act_working_bytes: float | None = None
    act_gathered_bytes: float | None = None
    extra: dict = field(default_factory=dict, metadata=WHOLE)
    order: tuple[str, ...] = field(
        default=(), compare=False, repr=False, metadata=WHOLE
    )  # as the writer gave them

    @classmethod
    def of(cls, **given) -> StepRecord:
        """A record from the writer's fields (`kind` aside): named fields typed, the rest kept in `extra`."""
        return cls(
            **{k: v for k, v in given.items() if k in FIELDS},
            extra={k: v for k, v in given.items() if k not in FIELDS and k != "kind"},
            order=tuple(given),
        )

    @classmethod
    def from_doc(cls, doc: dict) -> StepRecord:
        """A `step` line the tolerant reader accepted (`rundir.metrics.valid_record`)."""
        return cls.of(**doc)

    def to_doc(self) -> dict:
        named = {k: v for k in FIELDS if (v := getattr(self, k)) is not None}
        doc = {"kind": "step", **named, **self.extra}
        return {k: doc[k] for k in (*self.order, *doc) if k in doc} if self.order else doc


FIELDS = document_types(StepRecord)  # every named field and the types its value may have
REQUIRED_FIELDS = tuple(
    f.name
    for f in fields(StepRecord)
    if f.default is MISSING and f.default_factory is MISSING or f.metadata.get("required")
)
