"""status.json and the other JSON files of a run directory: tolerant reads, private atomic writes.

A disk problem can leave a status.json that is not an object, or a field of the wrong type. Nothing here
raises on what a run wrote: a status.json that cannot be read gives status `unknown` with the reason, and
a status field of the wrong type is dropped (and listed in `unreadable_fields`). Every run file is written
with mode 0600 through a `mkstemp` name in its folder, then renamed (`safeio.write_private`).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from enum import StrEnum
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_FILE_BYTES
from paradvisor.output import one_line
from paradvisor.rundir import RunDir

_NUM = (int, float)


class RunState(StrEnum):
    """A run's `status` in status.json (and in every engine's status document). A str: the JSON is unchanged
    and a state compares equal to its text."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"  # stopped by the user, a signal or the launcher (gracefully or at once)
    INTERRUPTED = "interrupted"  # the launcher itself was stopped before the run's end was known
    UNKNOWN = "unknown"  # a status.json that cannot be read

    @property
    def ended(self) -> bool:
        return self in TERMINAL


TERMINAL = (RunState.FINISHED, RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED)  # a run has ended
STATUSES = (RunState.RUNNING, *TERMINAL)  # what an engine writes
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
    from paradvisor.safeio import parse_json, read_text  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

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


MAX_REASON = 4000  # characters of a status's reason that are kept (a reason is a line or a few)


def typed_status(doc: dict, what: str = "status.json") -> dict:
    """A status document (read from a file, or sent by a node's agent) with every field of STATUS_TYPES of
    its declared type: others dropped (listed in `unreadable_fields`), the reason cut to MAX_REASON
    characters, the last log lines to 200 strings, an unknown status named `unknown` with why. The reason,
    name and label have their control characters and line breaks escaped (`output.one_line`)."""
    out, dropped = {}, []
    for key, value in doc.items():
        typ = STATUS_TYPES.get(key)
        if typ is not None and not _fits(value, typ) or isinstance(value, float) and not math.isfinite(value):
            dropped.append(str(key)[:80])
            continue
        out[key] = value
    for key in (
        "reason",
        "name",
        "label",
    ):  # shown on one line: a newline in them never starts a line of its own
        if isinstance(out.get(key), str):
            out[key] = one_line(out[key][:MAX_REASON])
    if key_list := out.get("last_log_lines"):
        out["last_log_lines"] = [str(x)[:2000] for x in key_list[-200:]]
    if out.get("status") not in STATUSES:
        out["reason"] = f"{what} names no known status ({str(out.get('status'))[:80]!r})"
        out["status"] = RunState.UNKNOWN
    if dropped:
        out["unreadable_fields"] = dropped[:50]
    return out


def read_status(path: Path) -> dict:
    """status.json as a dict whose fields have the types in STATUS_TYPES (`typed_status`); unreadable:
    status `unknown`."""
    doc, why = read_json_object(path)
    if doc is None:
        return {
            "status": RunState.UNKNOWN,
            "run_dir": str(path.parent),
            "reason": f"no readable status.json ({why})",
        }
    return typed_status(doc)


def write_json_atomic(path: Path, doc: dict) -> None:
    from paradvisor.safeio import finite, write_private  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

    write_private(path, json.dumps(finite(doc), indent=2, default=str, allow_nan=False))


def write_aborted(path: Path, preset, exc: BaseException) -> None:
    """The final status of a run whose start was cut short (Ctrl-C, a failure) after its folder was claimed
    and before it wrote a status: `runs` and `monitor` then see it (interrupted, or failed with the reason).
    A status already there is kept."""
    if path.exists():
        return
    interrupted = isinstance(exc, KeyboardInterrupt)
    why = "interrupted (Ctrl-C) while starting" if interrupted else f"failed while starting: {exc}"
    now = time.time()
    doc = {
        "schema": "paradvisor.status/1",
        "status": RunState.INTERRUPTED if interrupted else RunState.FAILED,
        "reason": why[:500],
        "run_dir": str(path.parent),
        "name": preset.name,
        "label": preset.plan.label(),
        "started": now,
        "ended": now,
        "failed_rank": None,
        "exit_code": None,
    }
    with contextlib.suppress(OSError):
        write_json_atomic(path, doc)


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
    doc = read_status(RunDir(run_dir).status)
    if doc.get("status") == RunState.RUNNING:
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
                "status": RunState.INTERRUPTED,
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
    return 0 if doc.get("status") == RunState.FINISHED else 1
