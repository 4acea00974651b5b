"""status.json and the other JSON files of a run directory: tolerant reads, private atomic writes.

A disk problem can leave a status.json that is not an object, or a field of the wrong type. Nothing here
raises on what a run wrote: a status.json that cannot be read gives status `unknown` with the reason, and
a status field of the wrong type is dropped (and listed in `unreadable_fields`). Every run file is written
with mode 0600 through a `mkstemp` name in its folder, then renamed (`safeio.write_private`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.limits import MAX_FILE_BYTES
from paradvisor.output import one_line
from paradvisor.rundir import RunDir
from paradvisor.typed import NULL, WHOLE, document_types


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


@dataclass(frozen=True)
class Status:
    """status.json as the readers see it (`Status.from_doc`: every field below of its declared type, others
    dropped and listed in `unreadable_fields`). The fields are what the readers use; `doc` is the whole
    document (the engines' own fields, a run's lineage, ...), and `to_doc()` gives it back unchanged."""

    status: str = RunState.UNKNOWN  # a RunState
    reason: str | None = field(default=None, metadata=NULL)
    label: str | None = None
    name: str | None = None
    run_dir: str | None = None
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    pid: int | None = None
    pid_started: float | None = None
    launcher_pid: int | None = None
    launcher_started: float | None = None
    failed_rank: int | None = field(default=None, metadata=NULL)
    exit_code: int | None = field(default=None, metadata=NULL)
    hung: bool | None = None
    oom: bool | None = None
    replan: dict | None = field(default=None, metadata=NULL)
    world_size: int | None = None
    node_rank: int | None = None
    returncode: int | None = field(default=None, metadata=NULL)
    last_log_lines: list | None = None
    hang_timeout_s: float | None = field(default=None, metadata=NULL)
    doc: dict = field(default_factory=dict, repr=False, compare=False, metadata=WHOLE)

    @property
    def state(self) -> RunState:
        return RunState(self.status)

    @property
    def unreadable_fields(self) -> list[str]:
        return self.doc.get("unreadable_fields") or []

    def to_doc(self) -> dict:
        return dict(self.doc)

    def get(self, key: str, default=None):
        """A field of the document by name, the engines' own included (`engine`, `failed_node`, lineage)."""
        return self.doc.get(key, default)

    def with_fields(self, **changed) -> Status:
        return Status.from_typed({**self.doc, **changed})

    @classmethod
    def from_typed(cls, typed: dict) -> Status:
        return cls(**{k: typed[k] for k in STATUS_TYPES if k in typed}, doc=typed)

    @classmethod
    def from_doc(cls, doc: dict, what: str = "status.json") -> Status:
        return cls.from_typed(typed_status(doc, what))


# The type of every status field a reader uses, from Status; a field of another type is dropped (and counted).
STATUS_TYPES = document_types(Status)


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
        return bool in typ
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


def read_status(path: Path) -> Status:
    """status.json, its fields of the types in STATUS_TYPES (`Status.from_doc`); unreadable: status `unknown`."""
    doc, why = read_json_object(path)
    if doc is None:
        return Status.from_typed(
            {
                "status": RunState.UNKNOWN,
                "run_dir": str(path.parent),
                "reason": f"no readable status.json ({why})",
            }
        )
    return Status.from_doc(doc)


def write_json_atomic(path: Path, doc: dict) -> None:
    from paradvisor.safeio import finite, write_private  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

    write_private(path, json.dumps(finite(doc), indent=2, default=str, allow_nan=False))


def write_final(path: Path, doc: dict, checkpoint_dir: str | None) -> dict:
    """An ended run's status (at `path`, in its run directory). On a full disk (a checkpoint filled it: the ranks
    failed on it), the run's incomplete checkpoints (`.step-N.partial`: nothing loads them) are removed to make
    room and the status written again; when it still cannot be written, the returned doc says so (the folder then
    reads as interrupted) and the run's end is reported as a failure, never as bad input."""
    try:
        write_json_atomic(path, doc)
        return doc
    except OSError as exc:
        err = exc
    if err.errno == errno.ENOSPC:
        from paradvisor.rundir.checkpoints import checkpoint_root, drop_partials  # noqa: PLC0415 - only an ended run

        if drop_partials(checkpoint_root(path.parent, checkpoint_dir)):
            full = "the disk was full at the run's end (its incomplete checkpoint was removed to write this)"
            freed = {**doc, "note": full}
            # what the ranks could not write is likely why they failed
            if doc.get("status") == RunState.FAILED:
                freed["reason"] = f"{doc.get('reason') or 'failed'}; {full}"
            try:
                write_json_atomic(path, freed)
                return freed
            except OSError as again:
                err = again
    why = f"{path.name} could not be written: {err.strerror or err}"
    finished = doc.get("status") == RunState.FINISHED  # a run without its final status did not finish
    return {
        **doc,
        "status": RunState.FAILED if finished else doc["status"],
        "reason": "; ".join(x for x in (doc.get("reason"), why) if x),
    }


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


def effective_status(run_dir: Path) -> Status:
    """status.json (read tolerantly: read_status), but a run left `running` whose launcher and torchrun
    agent are gone (checked by pid and start time) reads as `interrupted`."""
    st = read_status(RunDir(run_dir).status)
    if st.status == RunState.RUNNING:
        if st.launcher_pid is not None:
            alive = _alive(st.launcher_pid, st.launcher_started) or _alive(st.pid, st.pid_started)
        else:  # a status written before start times were recorded: the pid and its start after the run's
            alive = _alive(st.pid, None) and not (
                st.started is not None and _created(st.pid) > st.started + 5
            )
        if not alive:
            st = st.with_fields(
                status=RunState.INTERRUPTED, reason="the launcher stopped without writing a final status"
            )
    return st


def _created(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def main_exit_code(doc: dict) -> int:
    return 0 if doc.get("status") == RunState.FINISHED else 1
