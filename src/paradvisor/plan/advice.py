"""The one advice path: a request (model, workload, machines, calibration, rules) in, a ranked
Recommendation out. `paradvisor recommend`, `explain`, `launch --model` and the TUI all call
`advise()`, so the same input gives the same ranking — and, through `rundir.from_plan.preset_from_estimate`,
the same preset — everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, field

from paradvisor import collector
from paradvisor.errors import InputError
from paradvisor.hardware import calibration
from paradvisor.model.families import resolve_attention
from paradvisor.model.load import load_profile
from paradvisor.plan.search import recommend
from paradvisor.record import record
from paradvisor.rules.loader import load_rule_sets
from paradvisor.spec.capability import family_of
from paradvisor.spec.plan import Workload
from paradvisor.typed import from_table

DEFAULT_SEQ_CAP = 2048
DEFAULT_BATCH_PER_GPU = 8


@record(frozen=True)
class Request:
    model: str
    cluster: object  # hardware.types.Cluster
    cluster_ref: dict = field(default_factory=dict)  # how the preset names the machines ({"file": ...}, ...)
    seq_len: int | None = None  # None: min(model context, 2048)
    global_batch: int | None = None  # None: 8 per GPU
    precision: str = "auto"
    attention: str = "auto"  # auto: the family's own pick (model/families/)
    margin: float = 0.10
    top: int = 5
    rules: tuple[str, ...] = ()  # extra rule folders
    use_rules: bool = True
    calibrated: bool = True  # measured figures from `paradvisor calibrate` in place of catalogue ones
    runtime: str = "paradvisor"  # what runs the ranks (spec/capability.RUNTIMES): only its plans are ranked


def default_workload(
    profile,
    cluster,
    *,
    seq_len=None,
    global_batch=None,
    precision="auto",
    attention="auto",
    model: str | None = None,
):
    """The workload in force: given values, else the model's context (capped at 2048) and 8 samples per GPU;
    the attention the family's code runs ("auto": its own pick; one it does not support: InputError)."""
    attention = resolve_attention(family_of(profile), attention)
    s = profile.transformer
    seq = seq_len if seq_len is not None else (min(s.max_positions, DEFAULT_SEQ_CAP) if s else 1)
    gb = global_batch if global_batch is not None else DEFAULT_BATCH_PER_GPU * max(1, cluster.gpu_count)
    return Workload(
        model=model or profile.name, seq_len=seq, global_batch=gb, precision=precision, attention=attention
    )


def advise(req: Request, profile=None):
    """Rank the plans for `req`. `profile` may be given when the caller already loaded the model."""
    if not 0 <= req.margin < 1:
        raise InputError(f"--margin must be in [0, 1), got {req.margin}")
    if req.top < 1:
        raise InputError(f"--top must be at least 1, got {req.top}")
    profile = profile if profile is not None else load_profile(req.model)
    cluster = calibration.apply(req.cluster) if req.calibrated else req.cluster
    wl = default_workload(
        profile,
        cluster,
        seq_len=req.seq_len,
        global_batch=req.global_batch,
        precision=req.precision,
        attention=req.attention,
        model=req.model,
    )
    # The same typed checks and bounds as a preset's [workload] (paradvisor.limits), whichever way the request came.
    from_table(type(wl), asdict(wl), lambda k: f"--{k.replace('_', '-')}")
    rule_sets = None
    if req.use_rules:
        rule_sets = load_rule_sets(list(req.rules))
    with (
        collector.paused()
    ):  # what the search makes lives until it returns: nothing for the collector to free
        rec = recommend(
            profile, cluster, wl, top=req.top, margin=req.margin, rule_sets=rule_sets, runtime=req.runtime
        )
    rec.cluster_ref = dict(req.cluster_ref)
    return rec
