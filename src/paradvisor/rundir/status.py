"""status.json and the other JSON files of a run directory: tolerant reads, private atomic writes.

A disk problem can leave a status.json that is not an object, or a field of the wrong type. Nothing here
raises on what a run wrote: a status.json that cannot be read gives status `unknown` with the reason, and
a status field of the wrong type is dropped (and listed in `unreadable_fields`). Every run file is written
with mode 0600 through a `mkstemp` name in its folder, then renamed (`safeio.write_private`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from paradvisor.limits import MAX_FILE_BYTES

_NUM = (int, float)
TERMINAL = ("finished", "failed", "cancelled", "interrupted")  # a run in one of these has ended

STATUSES = ("running", "finished", "failed", "cancelled", "interrupted")
# The type of every status field a reader uses; a field of another type is dropped (and counted).
STATUS_TYPES = {
    "status": str,
    "reason": (str, type(None)),
    "label": str,
    "name": str,
    "run_dir": str,
    "started": _NUM,
    "ended": _NUM,
    "duration_s": _NUM,
    "pid": int,
    "pid_started": _NUM,
    "launcher_pid": int,
    "launcher_started": _NUM,
    "failed_rank": (int, type(None)),
    "exit_code": (int, type(None)),
    "hung": bool,
    "oom": bool,
    "replan": (dict, type(None)),
    "world_size": int,
    "node_rank": int,
    "returncode": (int, type(None)),
    "last_log_lines": list,
    "hang_timeout_s": (_NUM, type(None)),
}


def read_json_object(path: Path, *, limit: int = MAX_FILE_BYTES) -> tuple[dict | None, str | None]:
    """(the JSON object in `path`, None) or (None, why it cannot be read): never raises."""
    from paradvisor.errors import InputError
    from paradvisor.safeio import parse_json, read_text

    try:
        doc = parse_json(read_text(path, what="JSON file", limit=limit), str(path))
    except InputError as exc:
        return None, exc.message
    if not isinstance(doc, dict):
        return None, f"{path.name} holds {type(doc).__name__}, not a JSON object"
    return doc, None


def _fits(value, typ) -> bool:
    if isinstance(value, bool):  # True is an int to isinstance, not to a status reader
        return typ is bool
    return isinstance(value, typ)


def read_status(path: Path) -> dict:
    """status.json as a dict whose fields have the types in STATUS_TYPES; unreadable: status `unknown`."""
    doc, why = read_json_object(path)
    if doc is None:
        return {
            "status": "unknown",
            "run_dir": str(path.parent),
            "reason": f"no readable status.json ({why})",
        }
    out, dropped = {}, []
    for key, value in doc.items():
        typ = STATUS_TYPES.get(key)
        if typ is not None and not _fits(value, typ) or isinstance(value, float) and not math.isfinite(value):
            dropped.append(key)
            continue
        out[key] = value
    if key_list := out.get("last_log_lines"):
        out["last_log_lines"] = [str(x) for x in key_list[-200:]]
    if out.get("status") not in STATUSES:
        out["reason"] = f"status.json names no known status ({out.get('status')!r})"
        out["status"] = "unknown"
    if dropped:
        out["unreadable_fields"] = dropped
    return out


def write_json_atomic(path: Path, doc: dict) -> None:
    from paradvisor.safeio import finite, write_private

    write_private(path, json.dumps(finite(doc), indent=2, default=str, allow_nan=False))


def _alive(pid, started) -> bool:
    """Whether process `pid` is running and is the one that was started at `started` (its create time), not
    another process that got the pid after it ended."""
    import psutil

    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        p = psutil.Process(pid)
        if started is not None and abs(p.create_time() - started) > 1.0:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def effective_status(run_dir: Path) -> dict:
    """status.json (read tolerantly: read_status), but a run left `running` whose launcher and torchrun
    agent are gone (checked by pid and start time) reads as `interrupted`."""
    from paradvisor.rundir import RunDir

    doc = read_status(RunDir(run_dir).status)
    if doc.get("status") == "running":
        if "launcher_pid" in doc:
            alive = _alive(doc["launcher_pid"], doc.get("launcher_started")) or _alive(
                doc.get("pid"), doc.get("pid_started")
            )
        else:  # a status written before start times were recorded: the pid and its start after the run's
            started = doc.get("started")
            alive = _alive(doc.get("pid"), None) and not (
                started is not None and _created(doc["pid"]) > started + 5
            )
        if not alive:
            doc = {
                **doc,
                "status": "interrupted",
                "reason": "the launcher stopped without writing a final status",
            }
    return doc


def _created(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def main_exit_code(doc: dict) -> int:
    return 0 if doc.get("status") == "finished" else 1
