"""summary.json: an ended run's `runs` entry, kept beside its files so that listing 10,000 runs reads one small
file per run instead of its plan, status, metrics and prediction (issue 32, goal 3).

The files are the truth; the summary never is. It holds the entry `monitor.follow.summarize` made, already
rendered as `runs --json` prints it, and the size, modification time and inode of every file that entry was
made from (status.json, plan.toml, metrics.jsonl, prediction.json, nodes.json, samples.jsonl) and a hash of
the code that made it, and the path the run was listed under (the same directory listed under another path,
a relative one, is still it). The launcher writes it once a run has ended (`keep`). A reader uses it only when all of those match; otherwise (missing,
unreadable, another version, any input changed) the entry is made from the files again and the summary
rewritten (a read-only run directory just has none). Only ended runs with a recorded start and end are kept:
a running run's figures move with the clock. The one figure of an ended run that moves with the clock, the
age of each node's newest host reading, is stored as the reading's time and worked out when printed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.output import raw_stream
from paradvisor.rundir import METRICS, NODES, PLAN, PREDICTION, SAMPLES, STATUS, RunDir
from paradvisor.rundir.status import TERMINAL, RunState, Status, read_status

FILE = "summary.json"
SCHEMA = "paradvisor.run-summary/1"
INPUTS = (STATUS, PLAN, METRICS, PREDICTION, NODES, SAMPLES)
LINEAGE_KEYS = ("parent", "resume_step", "lineage_reason")  # what `runs` reads from status.json for lineages
ROW_KEYS = ("run_dir", "label", "status", "step", "total_steps", "progress", "loss", "samples_per_s")
ROW_KEYS += ("elapsed_s", "eta_s", "unreadable")  # what the `runs` table shows
_AGE = "\x00age:"  # a node's reading age in the rendered entry, filled in when printed
_SOURCES = ("follow.py", "runcache.py", "eta.py", "predict.py")
_CODE: str | None = None


def _code() -> str:
    global _CODE
    if _CODE is None:
        h = hashlib.sha256()
        here = Path(__file__).resolve().parent
        for name in (*_SOURCES, "../rundir/metrics.py", "../rundir/status.py", "../spec/preset.py"):
            try:
                h.update((here / name).read_bytes())
            except OSError:
                h.update(name.encode())
        _CODE = h.hexdigest()[:16]
    return _CODE


def inputs(run_dir: Path) -> dict[str, list[int] | None]:
    """name -> [size, mtime_ns, inode] of each file an entry is made from (None: absent)."""
    out: dict[str, list[int] | None] = {}
    for name in INPUTS:
        try:
            st = os.stat(os.path.join(run_dir, name))
            out[name] = [st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            out[name] = None
    return out


def indented(value, level: int) -> str:
    """`value` as `json.dumps(..., indent=2)` writes it `level` levels deep in a document."""
    text = json.dumps(value, indent=2, default=str, allow_nan=False)
    return text.replace("\n", "\n" + "  " * level) if level else text


@dataclass
class Entry:
    """One run of `runs`: its entry rendered two levels deep (the reading ages still to fill in), the times
    of those readings, the status fields lineages are built from, and the fields the table shows."""

    run_dir: str
    rendered: str
    sample_times: list[float]
    lineage: dict
    row: dict

    def text(self, now: float) -> str:
        """The entry as printed now (reading ages from `now`)."""
        out = self.rendered
        for i, t in enumerate(self.sample_times):
            out = out.replace(json.dumps(f"{_AGE}{i}"), json.dumps(max(0.0, now - t)), 1)
        return out

    def doc(self, now: float) -> dict:
        return json.loads(self.text(now))


def _lineage(status: Status) -> dict:
    doc = status.to_doc()
    return {k: doc[k] for k in LINEAGE_KEYS if k in doc}


def _cacheable(doc: dict, status: Status) -> bool:
    return (
        doc.get("status") in TERMINAL
        and status.status == doc.get("status")  # not a `running` left behind (read by pid)
        and status.ended is not None
        and status.started is not None
        and doc.get("eta_s") is None
    )


def make(run_dir: Path) -> tuple[Entry, bool]:
    """(the entry made from the run's files now, whether it may be kept)."""
    from paradvisor.monitor.follow import summarize  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it
    from paradvisor.safeio import finite  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

    raw = summarize(run_dir)
    doc = finite(raw)
    status = read_status(RunDir(run_dir).status)
    times = []
    for n in doc.get("nodes") or []:
        smp = n.get("sample") if isinstance(n, dict) else None
        if smp and isinstance(n.get("sample_age_s"), float) and isinstance(smp.get("time"), (int, float)):
            n["sample_age_s"] = f"{_AGE}{len(times)}"
            times.append(float(smp["time"]))
    entry = Entry(
        run_dir=str(run_dir),
        rendered=indented(doc, 2),
        sample_times=times,
        lineage=_lineage(status),
        row={k: raw.get(k) for k in ROW_KEYS},  # as the table prints them (a diverged loss is nan)
    )
    return entry, _cacheable(doc, status)


def load(run_dir: Path, sigs: dict) -> Entry | None:
    """The kept entry when summary.json describes exactly these inputs with this code, else None."""
    from paradvisor.safeio import read_text  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

    try:
        st = json.loads(read_text(os.path.join(run_dir, FILE), what="run summary", limit=64 << 20))
        if st["schema"] != SCHEMA or st["code"] != _code() or st["inputs"] != sigs:
            return None
        entry = Entry(str(run_dir), st["rendered"], st["sample_times"], st["lineage"], st["row"])
        kept_under = st["path"]
    except (InputError, ValueError, KeyError, TypeError, RecursionError):
        return None
    ok = (
        isinstance(entry.rendered, str)
        and isinstance(entry.lineage, dict)
        and isinstance(entry.row, dict)
        and isinstance(entry.sample_times, list)
        and all(isinstance(t, float) and math.isfinite(t) for t in entry.sample_times)
        and isinstance(kept_under, str)
    )
    if not ok:
        return None
    return entry if kept_under == entry.run_dir or _relisted(entry, kept_under) else None


def _relisted(entry: Entry, kept_under: str) -> bool:
    """The same directory listed under another path (the launcher keeps its summary under the path it ran in;
    `runs` may list it under a relative one): the entry names the path it is listed under now. A directory
    that only looks the same (a copy, a renamed runs folder, a link of another name) is not this one."""
    here = entry.run_dir
    if os.path.basename(os.path.normpath(kept_under)) != os.path.basename(os.path.normpath(here)):
        return False
    if os.path.realpath(kept_under) != os.path.realpath(here):
        return False
    old, new = json.dumps(kept_under), json.dumps(here)
    if entry.rendered.count(f'"run_dir": {old}') != 1 or entry.row.get("run_dir") != kept_under:
        return False
    entry.rendered = entry.rendered.replace(f'"run_dir": {old}', f'"run_dir": {new}', 1)
    entry.row["run_dir"] = here
    return True


def keep(run_dir: str | Path) -> None:
    """Make and keep an ended run's summary.json now (the launcher, once its status is final), so that the
    first `runs` after it reads one file for it. Best effort: `runs` makes it when it is missing."""
    try:
        entry_of(Path(run_dir))
    except Exception:  # an optimisation only: never let it change how the run ended
        return


def save(run_dir: Path, entry: Entry, sigs: dict) -> None:
    """Keep `entry` as summary.json (best effort: a read-only run directory keeps none)."""
    from paradvisor.safeio import write_private  # noqa: PLC0415 - start-up: `paradvisor runs` does not load it

    # the path it was listed under: the entry names it (a runs folder renamed, or given another way, is new)
    doc = {"schema": SCHEMA, "code": _code(), "inputs": sigs, "path": str(run_dir), **vars(entry)}
    doc.pop("run_dir")
    try:
        write_private(Path(run_dir) / FILE, json.dumps(doc, separators=(",", ":")))
    except (OSError, ValueError):
        pass


def entry_of(run_dir: Path) -> Entry:
    """The run's entry: from summary.json when it matches the files, else made from them (and kept)."""
    sigs = inputs(run_dir)
    entry = load(run_dir, sigs)
    if entry is not None:
        return entry
    entry, keep = make(run_dir)
    if keep and inputs(run_dir) == sigs:  # nothing changed while it was made
        save(run_dir, entry, sigs)
    return entry


def unreadable_entry(d: Path, exc: Exception) -> Entry:
    doc = {
        "run_dir": str(d),
        "name": d.name,
        "label": None,
        "status": RunState.UNKNOWN,
        "step": 0,
        "total_steps": None,
        "loss": None,
        "samples_per_s": None,
        "elapsed_s": 0.0,
        "reason": f"unreadable run directory: {type(exc).__name__}: {exc}",
        "skipped_lines": 0,
        "unreadable": ["the run directory"],
    }
    status = read_status(RunDir(d).status)
    lineage = _lineage(status)
    return Entry(str(d), indented(doc, 2), [], lineage, {k: doc.get(k) for k in ROW_KEYS})


def entries(runs_dir: str | Path) -> list[Entry]:
    """Every run directory under `runs_dir`, in name order; one that cannot be read is listed as `unknown`
    with the reason, never an error for the whole list."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out = []
    for name in names:
        d = root / name
        try:
            if not (os.path.isdir(d) and os.path.exists(os.path.join(d, STATUS))):  # RunDir.is_run
                continue
            out.append(entry_of(d))
        except (OSError, ValueError, TypeError, ArithmeticError) as exc:
            out.append(unreadable_entry(d, exc))
    return out


def write_runs_json(stream, runs_dir: str, runs: list[tuple[Entry, dict]]) -> int:
    """`runs --json`: the same text as `output.emit_json` of {schema, runs_dir, runs}, written entry by entry
    from the rendered entries (json's indenting encoder is pure Python: 10,000 runs took seconds). 0."""
    stream = raw_stream(stream)
    stream.write('{\n  "schema": "paradvisor.runs/1",\n  "runs_dir": ' + indented(runs_dir, 1) + ",\n")
    if not runs:
        stream.write('  "runs": []\n}\n')
        return 0
    stream.write('  "runs": [\n')
    t = time.time()
    for i, (e, extra) in enumerate(runs):
        body = e.text(t)
        stream.write("    " + body[: -len("\n    }")] + ",\n" + indented(extra, 2)[2:])
        stream.write(",\n" if i + 1 < len(runs) else "\n")
    stream.write("  ]\n}\n")
    return 0
