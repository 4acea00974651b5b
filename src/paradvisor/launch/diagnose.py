"""Why a run failed: which rank (or the torchrun agent) broke it, with what exit code or signal, its last log
lines; and for a hung run, every rank's Python stack and the rank that stopped making progress."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from paradvisor.rundir import LAUNCHER_LOG, RunDir, launcher_log_name, rank_process, read_tail, tail_lines
from paradvisor.rundir.status import read_json_object

PEER_ERRORS = (
    "connection reset by peer",
    "connection closed by peer",
    "broken pipe",
    "connection refused",
    "remote worker",
    "communicator was aborted",
    "socket timeout",
    "recvbytes",
    "sendbytes",
    "the paradvisor launcher",
)


def is_peer_error(error: str | None) -> bool:
    """An error a rank gets because another rank (or the launcher) went away first."""
    e = (error or "").lower()
    return any(p in e for p in PEER_ERRORS)


def node_blame(final: dict | None) -> int:
    """How likely a failed node of a several-node run is the cause, from its final status (None: it has none):
    its own error 0, a rendezvous/agent failure 1, a peer's error 2."""
    if final is None:
        return 0  # unreachable, lost, or its agent refused the run: nothing else explains it
    if is_peer_error(final.get("reason") or "") or final.get("status") == "cancelled":
        return 2
    return 1 if final.get("failed_process") == "torchrun agent" else 0


AGENT_ERRORS = re.compile(
    r"Rendezvous\w*Error|DistNetworkError|DistStoreError|EADDRINUSE|address already in use", re.IGNORECASE
)


def _agent_failure(
    run_dir: Path, returncode: int, log: str, codes: dict, agent_pid: int | None, log_name: str = LAUNCHER_LOG
) -> dict | None:
    """The torchrun agent itself failed: killed by a signal (torchrun reports a rank's failure with exit code 1,
    so a negative code is the agent's own death), or its rendezvous failed before any rank could say why."""
    who = f"the torchrun agent (pid {agent_pid})" if agent_pid else "the torchrun agent"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode).name
        except ValueError:
            sig = f"signal {-returncode}"
        reason = f"{who} was killed by {sig}; its ranks were stopped"
    else:
        own = [d for d in codes.values() if d.get("exit_code") and not is_peer_error(d.get("error"))]
        line = next((ln.strip() for ln in reversed(log.splitlines()) if AGENT_ERRORS.search(ln)), None)
        if own or line is None:
            return None
        reason = f"{who} failed: {line[-300:]}"
    return {
        "failed_rank": None,
        "failed_process": "torchrun agent",
        "exit_code": returncode,
        "reason": reason,
        "last_log_lines": tail_lines(run_dir / log_name),
        "rank_exit_codes": {str(r): d.get("exit_code") for r, d in sorted(codes.items())},
    }


def diagnose(
    run_dir: Path,
    world: int,
    returncode: int,
    agent_pid: int | None = None,
    node_rank: int = 0,
    log_name: str | None = None,
) -> dict:
    """Which rank (or the torchrun agent) failed, with what exit code or signal, and its last log lines."""
    codes = _exit_codes(run_dir, world)
    log_name = log_name or launcher_log_name(node_rank)
    log = read_tail(run_dir / log_name)
    agent = _agent_failure(run_dir, returncode, log, codes, agent_pid, log_name)
    if agent is not None:
        return agent
    failed_rank, exit_code = _culprit(run_dir, world, returncode, log, codes)
    reason = None
    if failed_rank in codes and codes[failed_rank].get("error"):
        reason = codes[failed_rank]["error"]
    elif exit_code is not None and exit_code < 0:
        try:
            reason = f"killed by signal {signal.Signals(-exit_code).name}"
        except ValueError:
            reason = f"killed by signal {-exit_code}"
    lines = (
        tail_lines(RunDir(run_dir).rank_log(failed_rank))
        if failed_rank is not None
        else tail_lines(run_dir / log_name)
    )
    if not reason:
        reason = next((ln for ln in reversed(lines) if ln.strip()), f"exit code {returncode}")
    return {
        "failed_rank": failed_rank,
        "exit_code": exit_code,
        "reason": reason,
        "last_log_lines": lines,
        "rank_exit_codes": {str(r): d.get("exit_code") for r, d in sorted(codes.items())},
    }


def _exit_codes(run_dir: Path, world: int) -> dict[int, dict]:
    """rank -> its rank-N.exit.json (exit code, error, time), for the ranks that wrote a readable one."""
    codes = {}
    for r in range(world):
        f = RunDir(run_dir).rank_exit(r)
        if f.exists():
            doc, _ = read_json_object(f)
            if (
                doc is not None
                and isinstance(doc.get("exit_code", 0), int)
                and isinstance(doc.get("time", 0), (int, float))
            ):
                codes[r] = {**doc, "error": str(doc["error"]) if doc.get("error") is not None else None}
    return codes


def _culprit(
    run_dir: Path, world: int, returncode: int, log: str, codes: dict
) -> tuple[int | None, int | None]:
    """(the rank that broke the run, its exit code) from torchrun's log and the ranks' exit files."""
    failed_rank, exit_code = None, returncode
    # torchrun names the first failure it saw ("Root Cause"): that is the rank that broke the run;
    # the others usually died of it (a peer's connection reset, torchrun's SIGTERM).
    root = log.split("Root Cause", 1)[1] if "Root Cause" in log else ""
    entry = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank.*\n\s*exitcode\s*:\s*(-?\d+)", re.M)
    m = entry.search(root)
    # Who broke the run, in order of evidence: a rank killed by a signal (not torchrun's own SIGTERM) or
    # gone without a word (os._exit, a segfault); else the rank whose own error came first — a peer's
    # "connection reset" is a consequence, not a cause; else torchrun's first observed failure.
    failures = [(int(r), int(c)) for r, c in entry.findall(log)]
    silent = [(r, c) for r, c in failures if c != 0 and c != -signal.SIGTERM and r not in codes]
    own = sorted(
        (d.get("time", 0), r)
        for r, d in codes.items()
        if d.get("exit_code") and not is_peer_error(d.get("error"))
    )
    killed = [(r, c) for r, c in silent if c < 0]
    if killed:
        return killed[0]
    if own:
        return own[0][1], codes[own[0][1]]["exit_code"]
    if silent:
        return silent[0]
    if m:
        return int(m.group(1)), int(m.group(2))
    bad = sorted((d.get("time", 0), r) for r, d in codes.items() if d.get("exit_code"))
    here = [r for r in range(world) if RunDir(run_dir).rank_pid(r).exists()] or range(world)  # this node's
    missing = [r for r in here if r not in codes]
    if bad:
        return bad[0][1], codes[bad[0][1]]["exit_code"]
    if missing:
        return missing[0], exit_code
    return failed_rank, exit_code


# How long a hung run's ranks get to write their stacks. The wait ends as soon as every rank has answered
# (faulthandler writes from its signal handler, in milliseconds), so only a rank that cannot answer costs the
# whole wait; 3 s was missed by healthy ranks on a loaded 2-core machine, which made them suspects.
HANG_DUMP_WAIT_S = 10.0


def _appended(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def dump_stacks(run_dir: Path, world: int) -> dict[int, list[str] | None]:
    """Ask every rank for its Python stacks (SIGUSR1 -> faulthandler, written to rank-N.stderr.log) before a
    hung run is stopped. Returns {rank: stack lines, or None when the rank did not answer} for the ranks
    running here (another node's ranks are that node's launcher's to ask)."""
    import psutil

    logs = {r: RunDir(run_dir).rank_log(r) for r in range(world)}
    sizes = {r: log.stat().st_size if log.exists() else 0 for r, log in logs.items()}
    asked = []
    for r in range(world):
        proc = rank_process(run_dir, r)
        if proc is not None:
            try:
                proc.send_signal(signal.SIGUSR1)
                asked.append(r)
            except (OSError, psutil.Error):
                continue
    answered = set()
    deadline = time.monotonic() + HANG_DUMP_WAIT_S
    while time.monotonic() < deadline and len(answered) < len(asked):
        answered = {r for r in asked if "most recent call first" in _appended(logs[r], sizes[r])}
        time.sleep(0.1)
    time.sleep(0.2)  # let the last dump finish writing
    return {r: _appended(logs[r], sizes[r]).splitlines() if r in answered else None for r in asked}


def _main_thread_frames(lines: list[str]) -> list[str]:
    """The main thread's frames, innermost first, from a faulthandler dump of every thread. The signal may
    land on any thread, so the main thread is found by its outermost frame (`<module>`), not by the
    'Current thread' label."""
    blocks: list[tuple[bool, list[str]]] = []
    for ln in lines:
        if ln.startswith(("Thread 0x", "Current thread 0x")):
            blocks.append((ln.startswith("Current"), []))
        elif blocks and ln.startswith("  File"):
            blocks[-1][1].append(ln.strip())
    for _, frames in blocks:
        if frames and frames[-1].endswith("in <module>") or any("_run_module_as_main" in f for f in frames):
            return frames
    current = [frames for is_current, frames in blocks if is_current]
    return current[0] if current else (blocks[0][1] if blocks else [])


def hang_suspects(stacks: dict[int, list[str] | None]) -> list[int]:
    """Ranks that look stuck on their own rather than waiting for a peer: those that did not answer the
    stack request, and those whose innermost frame is outside torch (a rank blocked in a collective or in
    backward's all-reduce sits in torch, waiting for the suspect)."""
    out = []
    for r, lines in sorted(stacks.items()):
        if lines is None:
            out.append(r)
            continue
        frames = _main_thread_frames(lines)
        if frames and f"{os.sep}torch{os.sep}" not in frames[0]:
            out.append(r)
    return out


def hang_report(
    run_dir: Path,
    stacks: dict[int, list[str] | None],
    hang: float,
    rc: int,
    world: int,
    log_name: str = LAUNCHER_LOG,
) -> dict:
    d = diagnose(run_dir, world, rc, log_name=log_name)
    suspects = hang_suspects(stacks)
    from paradvisor.monitor.follower import MetricsFollower  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    follower = MetricsFollower(run_dir)
    follower.poll(keep=0)
    last = follower.records.last_by_rank
    steps = ", ".join(f"rank {r} step {last.get(r, 0)}" for r in range(world))
    failed = suspects[0] if len(suspects) == 1 else None
    who = (
        f"rank {failed} stopped making progress, the others waited for it"
        if failed is not None
        else "no single rank to blame"
    )
    reason = f"no progress for {hang:g} s (hung): {who}; last logged: {steps}; all ranks stopped"
    frames = _main_thread_frames(stacks[failed] or []) if failed is not None else []
    lines = (
        ["(the rank did not answer the stack request)"]
        if failed is not None and stacks[failed] is None
        else frames or d["last_log_lines"]
    )
    return {
        **d,
        "failed_rank": failed,
        "exit_code": None,
        "reason": reason,
        "hung": True,
        "hang_suspects": suspects,
        "last_steps": {str(r): last.get(r, 0) for r in range(world)},
        "last_log_lines": lines,
        "stacks": {str(r): _main_thread_frames(v) if v else None for r, v in sorted(stacks.items())},
    }
