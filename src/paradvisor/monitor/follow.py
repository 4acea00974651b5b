"""Follow a run directory: new metrics lines as they are appended, and a summary of where it stands."""

from __future__ import annotations

import math
import time
from pathlib import Path

from paradvisor.launch.runner import TERMINAL, effective_status
from paradvisor.runfiles import MetricsReader, MetricsTally


class MetricsFollower:
    """Follows metrics.jsonl: `poll()` reads what was appended (a partial last line is kept until it is complete,
    lines that are not well-formed records are skipped and counted in `skipped`) and returns the newest new
    records; `records` is the running summary (`runfiles.MetricsTally`) that `summarize` takes, so memory does
    not grow with the file."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.reader = MetricsReader(self.run_dir / "metrics.jsonl")

    def poll(self, keep: int = 1000) -> list[dict]:
        return self.reader.read(keep)

    @property
    def records(self) -> MetricsTally:
        return self.reader.tally

    @property
    def skipped(self) -> int:
        return self.reader.skipped


def plan_doc(run_dir: Path) -> dict:
    """plan.toml as a preset document, or {} when it cannot be read or is not a valid preset."""
    from paradvisor.errors import InputError
    from paradvisor.launch.preset import load_preset

    try:
        return load_preset(run_dir / "plan.toml").to_doc()
    except (InputError, RecursionError):
        return {}


def failure_text(status: dict) -> str | None:
    """One line on why a run did not finish: which rank, exit code or signal, the reason."""
    if status.get("status") not in ("failed", "cancelled", "interrupted"):
        return None
    rank, code, reason = status.get("failed_rank"), status.get("exit_code"), status.get("reason") or ""
    if status.get("hung") or rank is None:
        return reason
    if code is None:
        return f"rank {rank}: {reason}"
    return f"rank {rank} exit code {code}: {reason}"


SAMPLES_TAIL = 1 << 20  # bytes of samples.jsonl read for the newest reading of each node


def latest_samples(run_dir: Path) -> dict[int, dict]:
    """The newest reading of each node from the end of samples.jsonl (bounded read; bad lines skipped)."""
    import json

    from paradvisor.launch.runner import _read_tail

    out: dict[int, dict] = {}
    for line in reversed(_read_tail(run_dir / "samples.jsonl", SAMPLES_TAIL).splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        node = rec.get("node") if isinstance(rec, dict) else None
        if isinstance(node, int) and not isinstance(node, bool) and node not in out and \
                isinstance(rec.get("time"), (int, float)) and isinstance(rec.get("gpus", []), list):
            out[node] = {k: rec.get(k) for k in ("time", "host", "cpu_pct", "ram_used_bytes", "ram_total_bytes")}
            out[node]["gpus"] = [{k: g.get(k) for k in ("index", "util_pct", "mem_used_bytes", "mem_total_bytes")}
                                 for g in rec.get("gpus", []) if isinstance(g, dict)]
    return out


def node_view(run_dir: Path, tally: MetricsTally, status: dict) -> tuple[list[dict], list[dict]]:
    """(nodes, ranks) of a run: per node its host, state, ranks, their step range and its newest GPU/CPU
    reading (each node's own sampler); per rank its node and last step. nodes.json (ssh engine) names hosts
    and states; a local run's node is this machine."""
    from paradvisor.runfiles import read_json_object

    doc, _ = read_json_object(run_dir / "nodes.json") if (run_dir / "nodes.json").exists() else (None, None)
    listed = [n for n in (doc or {}).get("nodes", []) if isinstance(n, dict) and isinstance(n.get("node"), int)]
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
        nodes.append({"node": i, "host": n.get("host") or (sample or {}).get("host"),
                      "state": n.get("state") or status.get("status"), "reason": n.get("reason"), "ranks": ranks,
                      "step_min": min(steps) if steps else None, "step_max": max(steps) if steps else None,
                      "sample": sample, "sample_age_s": max(0.0, now - sample["time"]) if sample else None})
    ranks = [{"rank": r, "node": node_of.get(r), "step": tally.last_by_rank.get(r, 0)}
             for r in sorted(set(tally.last_by_rank) | set(node_of))[:65536]]
    return nodes, ranks


def summarize(run_dir: str | Path, records: MetricsTally | list | None = None, *, skipped: int = 0) -> dict:
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
    total = plan.get("train", {}).get("steps") or None
    last_step = tally.last_step
    step_time = tally.step_time()
    batch = plan.get("workload", {}).get("global_batch", 0)
    gsps = (batch / step_time) if step_time else None
    now = time.time()
    ended = status.get("ended", now) if status.get("status") in TERMINAL else now
    elapsed = ended - (tally.start_time or status.get("started", now))
    eta = (total - last_step) * step_time if total and step_time and status.get("status") == "running" else None
    pred = plan.get("prediction", {})
    p = plan.get("plan", {})
    rounds = total_rounds = None
    if p.get("diloco"):  # progress in outer rounds: nodes run different numbers of local steps
        total_rounds = math.ceil((total or 1) / max(1, int(p.get("local_steps") or 1)))
        rounds = tally.rounds
    nodes, ranks = node_view(run_dir, tally, status)
    return {
        "schema": "paradvisor.monitor/1",
        "engine": status.get("engine", "local"),
        "nodes": nodes,
        "ranks": ranks,
        "failed_node": status.get("failed_node"),
        "run_dir": str(run_dir),
        "name": plan.get("name", status.get("name", run_dir.name)),
        "label": status.get("label"),
        "status": status.get("status"),
        "reason": status.get("reason"),
        "failed_rank": status.get("failed_rank"),
        "exit_code": status.get("exit_code"),
        "last_log_lines": status.get("last_log_lines", []),
        "hung": bool(status.get("hung")),
        "failure": failure_text(status),
        "oom": bool(status.get("oom")),
        "replan": status.get("replan"),
        "step": last_step,
        "total_steps": total,
        "progress": (rounds / total_rounds) if total_rounds else ((last_step / total) if total else None),
        "round": rounds,
        "total_rounds": total_rounds,
        "loss": tally.last_loss,
        "loss_history": [x for x in tally.losses if math.isfinite(x)],
        "step_time_s": step_time,
        "samples_per_s": gsps,
        "throughput_history": [batch / t for t in tally.step_times_rank0],
        "world_size": tally.world,
        "model_state_bytes_per_rank": tally.mem,
        "cuda_peak_bytes": tally.peak or None,
        "sync_wait_s_by_rank": {str(k): v for k, v in sorted(tally.waits.items())},
        "elapsed_s": max(0.0, elapsed),
        "eta_s": eta,
        "predicted": {"step_time_s": pred.get("step_time_s"), "memory_per_gpu_bytes": pred.get("memory_per_gpu_bytes"),
                      "samples_per_s": pred.get("samples_per_s")},
        "skipped_lines": skipped,
        "unreadable": ([f"{skipped} line(s) of metrics.jsonl"] if skipped else [])
        + ([f"status.json fields {', '.join(status['unreadable_fields'])}"] if status.get("unreadable_fields") else [])
        + (["plan.toml"] if not plan and (run_dir / "plan.toml").exists() else []),
    }


def list_runs(runs_dir: str | Path) -> list[dict]:
    """A summary of every run directory under `runs_dir`; one that cannot be read is listed as `unknown` with
    the reason, never an error for the whole list."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    out = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    for d in entries:
        try:
            if not (d.is_dir() and (d / "status.json").exists()):
                continue
            out.append(summarize(d))
        except (OSError, ValueError, TypeError, ArithmeticError) as exc:
            out.append({"run_dir": str(d), "name": d.name, "label": None, "status": "unknown", "step": 0,
                        "total_steps": None, "loss": None, "samples_per_s": None, "elapsed_s": 0.0,
                        "reason": f"unreadable run directory: {type(exc).__name__}: {exc}", "skipped_lines": 0,
                        "unreadable": ["the run directory"]})
    return out
