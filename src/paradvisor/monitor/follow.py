"""Follow a run directory: new metrics lines as they are appended, and a summary of where it stands."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

from paradvisor.launch.runner import TERMINAL, effective_status


class MetricsFollower:
    """Reads metrics.jsonl incrementally; a partial last line is kept until it is complete."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.offset = 0
        self.buffer = b""
        self.records: list[dict] = []

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self.buffer + chunk
        lines = data.split(b"\n")
        self.buffer = lines.pop()  # '' when the chunk ended with a newline
        new = []
        for line in lines:
            if not line.strip():
                continue
            try:
                new.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        self.records.extend(new)
        return new


def plan_doc(run_dir: Path) -> dict:
    try:
        return tomllib.loads((run_dir / "plan.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
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


def summarize(run_dir: str | Path, records: list[dict] | None = None) -> dict:
    """Status, progress, ETA, loss, throughput, memory and sync waits of a run, measured vs predicted."""
    run_dir = Path(run_dir)
    if records is None:
        f = MetricsFollower(run_dir)
        f.poll()
        records = f.records
    status = effective_status(run_dir)
    plan = plan_doc(run_dir)
    total = int(plan.get("train", {}).get("steps", 0)) or None
    steps = [r for r in records if r.get("kind") == "step"]
    outer = [r for r in records if r.get("kind") == "outer"]
    start = next((r["time"] for r in records if r.get("kind") == "start"), None)
    last_step = max((r["step"] for r in steps), default=0)
    losses = [r for r in steps if r.get("loss") is not None]
    last_loss = losses[-1]["loss"] if losses else None
    recent = [r for r in steps if r["step"] > last_step - 5]
    by_rank: dict[int, dict] = {}
    for r in steps:
        by_rank[r["rank"]] = r
    step_time = sum(r["step_time_s"] for r in recent) / len(recent) if recent else None
    world = max((r.get("world_size", 1) for r in records), default=1)
    gsps = (plan.get("workload", {}).get("global_batch", 0) / step_time) if step_time else None
    mem = max((r.get("mem_model_state_bytes", 0) for r in steps), default=0)
    peak = max((r.get("cuda_max_allocated_bytes", 0) for r in steps), default=0) or None
    elapsed = (time.time() if status.get("status") not in TERMINAL else status.get("ended", time.time())) - (
        start or status.get("started", time.time()))
    eta = (total - last_step) * step_time if total and step_time and status.get("status") == "running" else None
    waits: dict[int, float] = {}
    for r in outer:
        waits[r["rank"]] = waits.get(r["rank"], 0.0) + r.get("sync_wait_s", 0.0)
    pred = plan.get("prediction", {})
    p = plan.get("plan", {})
    rounds = total_rounds = None
    if p.get("diloco"):  # progress in outer rounds: nodes run different numbers of local steps
        import math

        total_rounds = math.ceil((total or 1) / max(1, int(p.get("local_steps") or 1)))
        rounds = max((r["round"] for r in outer), default=0)
    return {
        "schema": "paradvisor.monitor/1",
        "run_dir": str(run_dir),
        "name": plan.get("name", run_dir.name),
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
        "loss": last_loss,
        "loss_history": [r["loss"] for r in losses if r["rank"] == losses[-1]["rank"]][-200:] if losses else [],
        "step_time_s": step_time,
        "samples_per_s": gsps,
        "throughput_history": [plan.get("workload", {}).get("global_batch", 0) / r["step_time_s"]
                               for r in steps if r["rank"] == 0 and r["step_time_s"] > 0][-200:],
        "world_size": world,
        "model_state_bytes_per_rank": mem,
        "cuda_peak_bytes": peak,
        "sync_wait_s_by_rank": {str(k): v for k, v in sorted(waits.items())},
        "elapsed_s": max(0.0, elapsed),
        "eta_s": eta,
        "predicted": {"step_time_s": pred.get("step_time_s"), "memory_per_gpu_bytes": pred.get("memory_per_gpu_bytes"),
                      "samples_per_s": pred.get("samples_per_s")},
    }


def list_runs(runs_dir: str | Path) -> list[dict]:
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        if d.is_dir() and (d / "status.json").exists():
            out.append(summarize(d))
    return out
