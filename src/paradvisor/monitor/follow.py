"""Follow a run directory: new metrics lines as they are appended, and a summary of where it stands."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.hardware.nvml import GPUSample, HostSample
from paradvisor.monitor.eta import eta
from paradvisor.monitor.follower import MetricsFollower
from paradvisor.monitor.predict import read_prediction, rel_error
from paradvisor.output import one_line
from paradvisor.rundir import PLAN, RunDir
from paradvisor.rundir import read_tail as _read_tail
from paradvisor.rundir.metrics import MetricsTally
from paradvisor.rundir.status import TERMINAL, RunState, Status, effective_status, read_json_object
from paradvisor.spec.preset import load_preset
from paradvisor.typed import from_table
from paradvisor.units import fmt_bytes, fmt_seconds


def plan_doc(run_dir: Path) -> dict:
    """plan.toml as a preset document, or {} when it cannot be read or is not a valid preset."""
    try:
        return load_preset(RunDir(run_dir).plan).to_doc()
    except (InputError, RecursionError):
        return {}


def failure_text(status: dict) -> str | None:
    """One line on why a run did not finish: which rank, exit code or signal, the reason."""
    if status.get("status") not in (RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED):
        return None
    rank, code = status.get("failed_rank"), status.get("exit_code")
    reason = one_line(status.get("reason") or "")  # from a file or sent by a node: never its own line
    if status.get("hung") or rank is None:
        return reason
    if code is None:
        return f"rank {rank}: {reason}"
    return f"rank {rank} exit code {code}: {reason}"


SAMPLES_TAIL = 1 << 20  # bytes of samples.jsonl read for the newest reading of each node


def latest_samples(run_dir: Path) -> dict[int, dict]:
    """The newest reading of each node from the end of samples.jsonl (bounded read; bad lines skipped)."""
    out: dict[int, dict] = {}
    for line in reversed(_read_tail(RunDir(run_dir).samples, SAMPLES_TAIL).splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        node = rec.get("node") if isinstance(rec, dict) else None
        if isinstance(node, int) and not isinstance(node, bool) and node not in out:
            reading = typed_sample(rec)
            if reading is not None:
                out[node] = reading
    return out


def typed_sample(rec: dict) -> dict | None:
    """A samples.jsonl record checked whole against the one schema its writer uses (hardware.nvml's
    HostSample and GPUSample: types, finite numbers, bounds), or None: a record with a string where a number
    belongs is skipped, never shown or computed with."""
    gpus = rec.get("gpus", [])
    if not isinstance(gpus, list) or len(gpus) > 1024 or not all(isinstance(g, dict) for g in gpus):
        return None
    try:
        doc = from_table(HostSample, rec, lambda k: f"samples.jsonl: {k}", skip=("gpus",))
        if set(doc) < {"time", "cpu_pct", "ram_used_bytes", "ram_total_bytes"}:
            return None
        doc["gpus"] = [
            {"index": None, "util_pct": None, "mem_used_bytes": None, "mem_total_bytes": None}
            | from_table(GPUSample, g, lambda k: f"samples.jsonl: gpus.{k}", skip=("error",))
            for g in gpus
        ]
    except InputError:
        return None
    if any(g["index"] is None for g in doc["gpus"]):
        return None
    host = rec.get("host")
    doc["host"] = one_line(host)[:200] if isinstance(host, str) else None
    return doc


def node_view(run_dir: Path, tally: MetricsTally, status: Status) -> tuple[list[dict], list[dict]]:
    """(nodes, ranks) of a run: per node its host, state, ranks, their step range and its newest GPU/CPU
    reading (each node's own sampler); per rank its node and last step. nodes.json (ssh engine) names hosts
    and states; a local run's node is this machine."""
    doc, _ = read_json_object(RunDir(run_dir).nodes) if RunDir(run_dir).nodes.exists() else (None, None)
    listed = [
        n for n in (doc or {}).get("nodes", []) if isinstance(n, dict) and isinstance(n.get("node"), int)
    ]
    node_of = dict(tally.node_by_rank)
    for n in listed:
        for r in n.get("ranks") or []:
            if isinstance(r, int):
                node_of.setdefault(r, n["node"])
    samples = latest_samples(run_dir)
    indices = sorted({n["node"] for n in listed} | set(node_of.values()) | set(samples))
    by_index = {n["node"]: n for n in listed}
    now = time.time()
    nodes = []
    for i in indices[:4096]:
        n = by_index.get(i, {})
        ranks = sorted(r for r, k in node_of.items() if k == i)
        steps = [tally.last_by_rank.get(r, 0) for r in ranks]
        sample = samples.get(i)
        nodes.append(
            {
                "node": i,
                "host": n.get("host") or (sample or {}).get("host"),
                "state": n.get("state") or status.status,
                "reason": n.get("reason"),
                "ranks": ranks,
                "step_min": min(steps) if steps else None,
                "step_max": max(steps) if steps else None,
                "sample": sample,
                "sample_age_s": max(0.0, now - sample["time"]) if sample else None,
            }
        )
    ranks = [
        {"rank": r, "node": node_of.get(r), "step": tally.last_by_rank.get(r, 0)}
        for r in sorted(set(tally.last_by_rank) | set(node_of))[:65536]
    ]
    return nodes, ranks


def merged_ranks(ranks: list[dict], tally: MetricsTally) -> list[dict]:
    """One row per rank: its progress, step time, loss and sync wait from the metrics (MetricsTally.ranks) and its
    node index from node_view (the metrics' own `node` where the run has no node map)."""
    rows = {k: dict(r) for k, r in tally.ranks.items()}
    for r in ranks:
        row = rows.setdefault(
            r["rank"],
            {
                "rank": r["rank"],
                "node": None,
                "step": r["step"],
                "step_time_s": None,
                "loss": None,
                "sync_wait_s": 0.0,
                "round": 0,
            },
        )
        if r["node"] is not None:
            row["node"] = r["node"]
    return [rows[k] for k in sorted(rows)]


@dataclass(frozen=True)
class Predicted:
    """What the run was compared with (prediction.json, else the preset's [prediction])."""

    step_time_s: float | None = None
    memory_per_gpu_bytes: float | None = None
    samples_per_s: float | None = None
    model_state_bytes: float | None = None
    # what torch's allocator should peak at: memory_per_gpu_bytes less the overhead outside it (CUDA context,
    # cuBLAS workspace), the twin of the measured cuda_max_allocated_bytes (as `validate` compares them)
    cuda_allocated_bytes: float | None = None
    source: str | None = None
    note: str | None = None
    device: str | None = None
    runs_on: str | None = None  # cuda | cpu: where the run ran (prediction.json)

    def eta_step_s(self) -> float | None:
        """The step time an ETA may start from: none from a GPU plan's prediction for a run on a CPU."""
        return None if self.runs_on == "cpu" and self.source == "preset" else self.step_time_s


@dataclass(frozen=True)
class Errors:
    """(predicted - measured) / measured per metric; None where either is missing."""

    step_time_s: float | None = None
    samples_per_s: float | None = None
    model_state_bytes: float | None = None
    cuda_peak_bytes: float | None = None


SUMMARY_SCHEMA = "paradvisor.monitor/1"


@dataclass(frozen=True)
class RunSummary:
    """Where a run stands, measured vs predicted: what `monitor`, `monitor --json`, `launch` and the TUI show.
    `to_doc()` is the JSON document (`paradvisor.monitor/1`, keys in this order)."""

    engine: str
    nodes: list[dict]
    failed_node: int | None
    run_dir: str
    name: str
    label: str | None
    status: str | None
    reason: str | None
    failed_rank: int | None
    exit_code: int | None
    last_log_lines: list[str]
    hung: bool
    failure: str | None
    oom: bool
    replan: dict | None
    step: int
    total_steps: int | None
    progress: float | None
    round: int | None
    total_rounds: int | None
    loss: float | None
    loss_history: list[float]
    loss_points: list[tuple[int, float]]
    eval_points: list[tuple[int, float]]
    step_time_s: float | None
    samples_per_s: float | None
    throughput_history: list[float]
    step_points: list[tuple[int, float]]
    throughput_points: list[tuple[int, float]]
    memory_points: list[tuple[int, float, float]]
    ranks: list[dict]
    world_size: int
    model_state_bytes_per_rank: float
    cuda_peak_bytes: float | None
    sync_wait_s_by_rank: dict[str, float]
    elapsed_s: float
    eta_s: float | None
    predicted: Predicted
    errors: Errors
    skipped_lines: int
    unreadable: list[str]
    phase: dict | None = None  # while the run is on: the phase in effect (monitor.follower.phase_doc)

    def to_doc(self) -> dict:
        doc = {"schema": SUMMARY_SCHEMA}
        for f in fields(self):
            v = getattr(self, f.name)
            doc[f.name] = asdict(v) if isinstance(v, (Predicted, Errors)) else v
        return doc


def summarize(run_dir: str | Path, records: MetricsTally | list | None = None, *, skipped: int = 0) -> dict:
    """summarize_run's document (the TUI reads it; `monitor --json` prints it)."""
    return summarize_run(run_dir, records, skipped=skipped).to_doc()


def summarize_run(
    run_dir: str | Path, records: MetricsTally | list | None = None, *, skipped: int = 0
) -> RunSummary:
    """Status, progress, ETA, loss, throughput, memory and sync waits of a run, measured vs predicted."""
    run_dir = Path(run_dir)
    if records is None:
        f = MetricsFollower(run_dir)
        f.poll(keep=0)
        f.reader.finish()
        records, skipped = f.records, f.skipped
    tally = records if isinstance(records, MetricsTally) else MetricsTally.of(records)
    status = effective_status(run_dir)
    plan = plan_doc(run_dir)
    own = any((plan.get("program") or {}).get(k) for k in ("script", "module"))  # its steps: what it reports
    total = tally.total_steps or (None if own else plan.get("train", {}).get("steps")) or None
    batch = plan.get("workload", {}).get("global_batch", 0)
    # the one definition, shared with `validate` (rundir.metrics.MetricsTally)
    step_time = tally.measured_step_time()
    gsps = (batch / step_time) if step_time else None
    predicted, errors = _compared(run_dir, plan, tally, step_time, gsps)
    nodes, ranks = node_view(run_dir, tally, status)
    return RunSummary(
        **_status_fields(status),
        nodes=nodes,
        run_dir=str(run_dir),
        name=plan.get("name", status.name or run_dir.name),
        **_progress(tally, status, plan, total, step_time, predicted.eta_step_s()),
        **_measured(tally, batch),
        step_time_s=step_time,
        samples_per_s=gsps,
        ranks=merged_ranks(ranks, tally),
        predicted=predicted,
        errors=errors,
        skipped_lines=skipped,
        unreadable=([f"{skipped} line(s) of metrics.jsonl"] if skipped else [])
        + ([f"status.json fields {', '.join(status.unreadable_fields)}"] if status.unreadable_fields else [])
        + ([PLAN] if not plan and RunDir(run_dir).plan.exists() else []),
    )


def _status_fields(status: Status) -> dict:
    """What status.json says: the run's state, and why it failed."""
    return {
        "engine": status.get("engine", "local"),
        "failed_node": status.get("failed_node"),
        "label": status.label,
        "status": status.status,
        "reason": status.reason,
        "failed_rank": status.failed_rank,
        "exit_code": status.exit_code,
        "last_log_lines": status.last_log_lines or [],
        "hung": bool(status.hung),
        "failure": failure_text(status.to_doc()),
        "oom": bool(status.oom),
        "replan": status.replan,
    }


def _progress(
    tally: MetricsTally,
    status: Status,
    plan: dict,
    total: int | None,
    step_time: float | None,
    predicted_step: float | None = None,
) -> dict:
    """Steps (or DiLoCo's outer rounds: nodes run different numbers of local steps), elapsed time and ETA."""
    last_step = tally.last_step
    now = time.time()
    ended = status.ended if status.status in TERMINAL and status.ended is not None else now
    # From the launch (status.json's `started`), the one start: the clock never jumps back when the first
    # rank's record arrives, and a finished run's elapsed is status.json's duration_s.
    started = status.started if status.started is not None else tally.start_time or now
    elapsed = ended - started
    # ETA: the predicted step time corrected by the measured one (the same median as the throughput)
    progress, eta_s = eta(
        last_step,
        total,
        predicted_s=predicted_step,
        measured_s=step_time,
        measured_steps=len(tally.slowest),
        running=status.status == RunState.RUNNING,
    )
    p = plan.get("plan", {})
    rounds = total_rounds = None
    if p.get("diloco"):
        total_rounds = math.ceil((total or 1) / max(1, int(p.get("local_steps") or 1)))
        rounds = tally.rounds
    return {
        "step": last_step,
        "total_steps": total,
        "progress": (rounds / total_rounds) if total_rounds else progress,
        "round": rounds,
        "total_rounds": total_rounds,
        "elapsed_s": max(0.0, elapsed),
        "eta_s": eta_s,
    }


def _measured(tally: MetricsTally, batch: int) -> dict:
    """Loss, throughput and memory as logged (histories for the plots)."""
    return {
        "loss": tally.last_loss,
        "loss_history": [x for x in tally.losses if math.isfinite(x)],
        "loss_points": tally.loss_points,
        "eval_points": tally.eval_points,
        "throughput_history": [batch / t for t in tally.step_times_rank0],
        "step_points": tally.step_points(),
        "throughput_points": [(s, batch / t) for s, t in tally.step_points() if t > 0],
        "memory_points": tally.memory_points(),
        "world_size": tally.world,
        "model_state_bytes_per_rank": tally.mem,
        "cuda_peak_bytes": tally.peak or None,
        "sync_wait_s_by_rank": {str(k): v for k, v in sorted(tally.waits.items())},
    }


def _compared(run_dir: Path, plan: dict, tally: MetricsTally, step_time, gsps) -> tuple[Predicted, Errors]:
    pred = read_prediction(run_dir, plan)
    predicted = Predicted(
        **{f.name: getattr(pred, f.name) for f in fields(Predicted) if f.name != "cuda_allocated_bytes"},
        cuda_allocated_bytes=pred.allocator_bytes(),
    )
    return predicted, Errors(
        step_time_s=rel_error(pred.step_time_s, step_time),
        samples_per_s=rel_error(pred.samples_per_s, gsps),
        model_state_bytes=rel_error(pred.model_state_bytes, tally.mem or None),
        cuda_peak_bytes=rel_error(predicted.cuda_allocated_bytes, tally.peak or None),
    )


def compare_rows(s: RunSummary) -> list[dict]:
    """Predicted vs measured for a summary, one row per metric with a prediction or a measurement:
    {metric, predicted, measured, error} as text ("" where absent). The CLI launch summary, `monitor` and the
    TUI all show these rows."""
    pred, err = s.predicted, s.errors
    rows = []

    def add(metric, p, m, e, fmt):
        if p is None and m is None:
            return
        rows.append(
            {
                "metric": metric,
                "predicted": "" if p is None else fmt(p),
                "measured": "" if m is None else fmt(m),
                "error": "" if e is None else f"{e:+.1%}",
            }
        )

    add("step time", pred.step_time_s, s.step_time_s, err.step_time_s, fmt_seconds)
    add("samples/s", pred.samples_per_s, s.samples_per_s, err.samples_per_s, lambda v: f"{v:.1f}")
    if s.cuda_peak_bytes:
        add(
            "CUDA peak allocated/GPU",
            pred.cuda_allocated_bytes,
            s.cuda_peak_bytes,
            err.cuda_peak_bytes,
            fmt_bytes,
        )
    add(
        "model states/rank",
        pred.model_state_bytes,
        s.model_state_bytes_per_rank or None,
        err.model_state_bytes,
        fmt_bytes,
    )
    return rows


def prediction_note(s: RunSummary) -> str:
    """Where the prediction came from, in words ('' when there is none)."""
    pred = s.predicted
    if not pred.source:
        return "no prediction for this run"
    return pred.note or ""


def node_lines(s: RunSummary) -> list[str]:
    """One line per node: host, state, its ranks and their steps, and its newest CPU/RAM/GPU reading
    (`paradvisor monitor` and the TUI's Monitor)."""
    out = []
    for n in s.nodes:
        ranks = ", ".join(f"rank {r['rank']} step {r['step']}" for r in s.ranks if r["node"] == n["node"])
        host = f" ({one_line(n['host'])})" if n["host"] else ""
        line = f"node {n['node']}{host}: {one_line(n['state'])}; {ranks or 'no rank yet'}"
        smp = n["sample"]
        if smp:
            if smp.get("cpu_pct") is not None:
                line += f"; CPU {smp['cpu_pct']:.0f}%"
            if smp.get("ram_used_bytes") and smp.get("ram_total_bytes"):
                line += f", RAM {fmt_bytes(smp['ram_used_bytes'])}/{fmt_bytes(smp['ram_total_bytes'])}"
            for g in smp.get("gpus") or []:
                if g.get("util_pct") is None:
                    line += f", GPU{g['index']} no reading"
                else:
                    line += (
                        f", GPU{g['index']} {g['util_pct']:.0f}% "
                        f"{fmt_bytes(g['mem_used_bytes'] or 0)}/{fmt_bytes(g['mem_total_bytes'] or 0)}"
                    )
        if n.get("reason") and n["state"] not in ("finished", "running", "joined"):
            line += f" — {one_line(n['reason'])}"
        out.append(line)
    return out
