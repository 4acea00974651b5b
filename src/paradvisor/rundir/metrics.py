"""metrics.jsonl, read tolerantly: shared by the launcher, `monitor`, `runs`, `validate` and the TUI.

A crash can leave a truncated last line in metrics.jsonl; a disk problem can leave garbage or a line that
is not an object. Nothing here raises on what a run wrote: a line that is not a well-formed record is
skipped and counted (`MetricsReader.skipped`). metrics.jsonl is streamed in bounded chunks and summed up
in `MetricsTally`, whose memory does not grow with the file (a 200 MB file is read with a few MiB).
(status.json: rundir/status.py.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
import time
from collections import deque
from pathlib import Path

from paradvisor.rundir.records import FIELDS, REQUIRED_FIELDS, StepRecord
from paradvisor.safeio import open_private

CHUNK = 1 << 20  # bytes read from metrics.jsonl at a time
MAX_LINE = 1 << 20  # a metrics line longer than this is garbage (a real one is a few hundred bytes)
HISTORY = 200  # points kept for the loss, throughput, step-time and memory plots
MAX_HISTORY_RANKS = 256  # ranks whose loss history is kept
MEASURE_STEPS = 256  # the measured step time is the median over (at most) this many newest steps ...
WARMUP_STEPS = 2  # ... after the first steps (start-up: allocator, autotuning, first collectives)
MAX_RANK_ROWS = 1024  # ranks whose own row (progress, sync wait, node) is kept

_NUM = (int, float)
# step-record fields whose largest value the tally keeps (validate's memory rows: the max over ranks and steps)
MAXIMA = tuple(k for k in FIELDS if k.endswith("_bytes"))
INDEX = "metrics.index.json"  # the tally so far, beside metrics.jsonl (see MetricsReader)
INDEX_SCHEMA = "paradvisor.metrics-index/1"
INDEX_EVERY = 4 << 20  # bytes of new log after which a reader writes the index again
_FP = 4096  # bytes of the log hashed at its start and before the index's offset
# What each record kind must carry (a record missing one, or holding the wrong type, is skipped) ...
REQUIRED = {
    "step": {k: FIELDS[k] for k in REQUIRED_FIELDS},
    "outer": {"rank": int, "round": int},
    "eval": {"step": int, "eval_loss": _NUM},
    "phase": {"phase": str, "expect_s": _NUM},  # work ahead that logs no step for a while (rundir/phases.py)
}
# ... and the type of every optional field the readers use, in any record (a wrong type also skips it).
OPTIONAL = FIELDS


class MetricsWriter:
    """Appends one rank's records to metrics.jsonl, each with its rank, node and time, in one write (a whole
    line or nothing): paradvisor's trainer and the user's code (paradvisor.runtime.report) both write here."""

    def __init__(self, path, rank: int, mirror=None):
        self.fd = open_private(path, append=True)  # never through a link planted at metrics.jsonl
        self.rank = rank
        self.mirror = mirror  # also given every record (TensorBoard on rank 0: train/tracking.py)
        # The node (its index in the plan's launch) this rank runs on: multi-node monitors group ranks by it.
        node = os.environ.get("PARADVISOR_NODE_INDEX", "0")
        self.node = int(node) if node.isdigit() else 0

    def write(self, record: dict | StepRecord) -> None:
        """Append one record: a StepRecord, or another kind's record as a dict (`kind` first)."""
        if isinstance(record, StepRecord):
            record = record.to_doc()
        record = {"rank": self.rank, "node": self.node, "time": time.time(), **record}
        # one write: the whole line or nothing
        os.write(self.fd, (json.dumps(record, default=float) + "\n").encode())
        if self.mirror is not None:
            self.mirror(record)

    def close(self) -> None:
        os.close(self.fd)
        if self.mirror is not None and hasattr(self.mirror, "close"):
            self.mirror.close()


def _is(value, typ) -> bool:
    return isinstance(value, typ) and not isinstance(value, bool)


def valid_record(rec) -> bool:
    """Whether a parsed metrics line is a record the readers can use."""
    if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
        return False
    for key, typ in REQUIRED.get(rec["kind"], {}).items():
        if not _is(rec.get(key), typ):
            return False
    for key, typ in OPTIONAL.items():
        v = rec.get(key)
        if v is not None and not _is(v, typ):
            return False
        # a diverged loss is news; the rest is not
        if isinstance(v, float) and not math.isfinite(v) and key != "loss":
            return False
    for key in ("rank", "step", "round", "world_size", "node"):
        if isinstance(rec.get(key), int) and rec[key] < 0:
            return False
    return rec.get("kind") != "step" or (math.isfinite(rec["step_time_s"]) and rec["step_time_s"] >= 0)


def median(values) -> float | None:
    v = sorted(values)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


class MetricsTally:
    """What the monitor shows, summed up record by record: memory bounded whatever the number of records.

    The one definition of a run's measured step time, shared by `monitor`, `validate`, `launch` and the TUI
    (`measured_step_time`): a synchronous step ends when its slowest rank ends, so each step counts with the
    slowest rank's time; the measurement is the median of that over the newest MEASURE_STEPS steps, the
    first WARMUP_STEPS left out while later steps exist. Measured throughput is the global batch over it."""

    def __init__(self):
        self.count = 0
        self.start_time = None
        self.last_step = 0
        self.last_by_rank: dict[int, int] = {}
        self.loss_rank = None
        self.last_loss = None
        self.losses_by_rank: dict[int, deque] = {}  # the history of the first MAX_HISTORY_RANKS ranks
        self.loss_steps_by_rank: dict[int, deque] = {}  # the same, as (step, loss)
        self.step_times_rank0: deque = deque(maxlen=HISTORY)
        # step -> the slowest rank's step time (newest MEASURE_STEPS steps); step -> (model states, CUDA peak)
        self.slowest: dict[int, float] = {}
        self.mem_by_step: dict[int, tuple[float, float]] = {}  # ... max over ranks
        self.ranks: dict[int, dict] = {}  # rank -> its row: step, step time, loss, sync wait, node, memory
        self.world = 1
        self.mem = 0
        self.peak = 0
        self.waits: dict[int, float] = {}
        self.rounds = 0
        self.node_by_rank: dict[int, int] = {}  # from the records' "node" (the node index each rank runs on)
        self.total_steps: int | None = None  # from the records, when the run's code says (runtime.report)
        self.maxima: dict[str, float] = {}  # step records: the largest value of each MAXIMA field (validate)
        self.first_start: dict = {}  # the first start record's device and GPU name
        self.evals: dict[int, float] = {}  # step -> eval loss (every rank records the same all-reduced value)

    def add(self, r: dict) -> None:
        self.count += 1
        kind = r["kind"]
        if isinstance(r.get("world_size"), int):
            self.world = max(self.world, r["world_size"])
        if (
            _is(r.get("rank"), int)
            and _is(r.get("node"), int)
            and (r["rank"] in self.node_by_rank or len(self.node_by_rank) < MAX_HISTORY_RANKS * 64)
        ):
            self.node_by_rank[r["rank"]] = r["node"]
        if kind == "start" and not self.first_start:
            self.first_start = {k: r[k] for k in ("device", "gpu_name") if isinstance(r.get(k), str)}
        if kind == "start" and self.start_time is None and _is(r.get("time"), _NUM):
            self.start_time = r["time"]
        elif kind == "step":
            for key in MAXIMA:
                v = r.get(key)
                if _is(v, _NUM) and math.isfinite(v) and v > self.maxima.get(key, -math.inf):
                    self.maxima[key] = v
            self.last_step = max(self.last_step, r["step"])
            if r.get("total_steps"):  # the user's own code says how many steps it runs (runtime.report)
                self.total_steps = r["total_steps"]
            self.last_by_rank[r["rank"]] = r["step"]
            if r.get("loss") is not None:
                self.loss_rank, self.last_loss = r["rank"], r["loss"]
                if r["rank"] in self.losses_by_rank or len(self.losses_by_rank) < MAX_HISTORY_RANKS:
                    self.losses_by_rank.setdefault(r["rank"], deque(maxlen=HISTORY)).append(r["loss"])
                    self.loss_steps_by_rank.setdefault(r["rank"], deque(maxlen=HISTORY)).append(
                        (r["step"], r["loss"])
                    )
            if r["rank"] == 0 and r["step_time_s"] > 0:
                self.step_times_rank0.append(r["step_time_s"])
            self.mem = max(self.mem, r.get("mem_model_state_bytes") or 0)
            self.peak = max(self.peak, r.get("cuda_max_allocated_bytes") or 0)
            step, dt = r["step"], r["step_time_s"]
            if step in self.slowest or not self.slowest or step > min(self.slowest):
                self.slowest[step] = max(self.slowest.get(step, 0.0), dt)
                if len(self.slowest) > MEASURE_STEPS:
                    del self.slowest[min(self.slowest)]
            m = self.mem_by_step.get(step, (0.0, 0.0))
            self.mem_by_step[step] = (
                max(m[0], r.get("mem_model_state_bytes") or 0),
                max(m[1], r.get("cuda_max_allocated_bytes") or 0),
            )
            if len(self.mem_by_step) > HISTORY:
                del self.mem_by_step[min(self.mem_by_step)]
            row = self._row(r)
            if row is not None:
                row.update(step=max(row["step"], step), step_time_s=dt, time=r.get("time"))
                if r.get("loss") is not None:
                    row["loss"] = r["loss"]
                row["mem_bytes"] = max(row["mem_bytes"], r.get("mem_model_state_bytes") or 0)
                row["peak_bytes"] = max(row["peak_bytes"], r.get("cuda_max_allocated_bytes") or 0)
        elif kind == "eval":
            if math.isfinite(r["eval_loss"]):
                self.evals[r["step"]] = r["eval_loss"]
                if len(self.evals) > HISTORY:
                    del self.evals[min(self.evals)]
        elif kind == "outer":
            self.waits[r["rank"]] = self.waits.get(r["rank"], 0.0) + (r.get("sync_wait_s") or 0.0)
            self.rounds = max(self.rounds, r["round"])
            row = self._row(r)
            if row is not None:
                row["sync_wait_s"] += r.get("sync_wait_s") or 0.0
                row["round"] = max(row["round"], r["round"])
        if kind == "start":
            self._row(r)

    def _row(self, r: dict) -> dict | None:
        """The row of the record's rank (created on first sight; None past MAX_RANK_ROWS ranks)."""
        rank = r.get("rank")
        if not _is(rank, int):
            return None
        row = self.ranks.get(rank)
        if row is None:
            if len(self.ranks) >= MAX_RANK_ROWS:
                return None
            row = self.ranks[rank] = {
                "rank": rank,
                "node": None,
                "step": 0,
                "step_time_s": None,
                "loss": None,
                "sync_wait_s": 0.0,
                "round": 0,
                "mem_bytes": 0,
                "peak_bytes": 0,
                "time": None,
            }
        if _is(r.get("node"), int):
            row["node"] = r["node"]  # the node index (launch order)
        if isinstance(r.get("node_name"), str):
            row["node_name"] = r["node_name"][:64]  # the plan's name for it (DiLoCo, unlike nodes)
        return row

    @property
    def losses(self) -> list:
        """The loss history of the rank that logged a loss last."""
        return list(self.losses_by_rank.get(self.loss_rank, ()))

    @property
    def loss_points(self) -> list[tuple[int, float]]:
        """(step, loss) of the rank that logged a loss last (finite values only)."""
        return [(s, x) for s, x in self.loss_steps_by_rank.get(self.loss_rank, ()) if math.isfinite(x)]

    @property
    def eval_points(self) -> list[tuple[int, float]]:
        """(step, eval loss) in step order."""
        return sorted(self.evals.items())

    def measured_step_time(self) -> float | None:
        """See the class: the median over steps of the slowest rank's step time, warm-up steps left out."""
        later = [t for s, t in self.slowest.items() if s > WARMUP_STEPS]
        return median(later or list(self.slowest.values()))

    def step_time(self) -> float | None:
        return self.measured_step_time()

    def step_points(self) -> list[tuple[int, float]]:
        """(step, the slowest rank's step time) for the newest HISTORY steps, in step order."""
        return sorted(self.slowest.items())[-HISTORY:]

    def memory_points(self) -> list[tuple[int, float, float]]:
        """(step, model-state bytes, CUDA peak bytes), max over ranks, in step order."""
        return [(s, a, b) for s, (a, b) in sorted(self.mem_by_step.items())]

    def to_state(self) -> dict:
        """Everything the tally holds, as JSON (integer keys as strings)."""

        def keyed(d: dict, f=lambda v: v) -> dict:
            return {str(k): f(v) for k, v in d.items()}

        return {
            "count": self.count,
            "start_time": self.start_time,
            "last_step": self.last_step,
            "last_by_rank": keyed(self.last_by_rank),
            "loss_rank": self.loss_rank,
            "last_loss": self.last_loss,
            "losses_by_rank": keyed(self.losses_by_rank, list),
            "loss_steps_by_rank": keyed(self.loss_steps_by_rank, lambda q: [list(x) for x in q]),
            "step_times_rank0": list(self.step_times_rank0),
            "slowest": keyed(self.slowest),
            "mem_by_step": keyed(self.mem_by_step, list),
            "ranks": keyed(self.ranks),
            "world": self.world,
            "mem": self.mem,
            "peak": self.peak,
            "waits": keyed(self.waits),
            "rounds": self.rounds,
            "node_by_rank": keyed(self.node_by_rank),
            "maxima": dict(self.maxima),
            "first_start": dict(self.first_start),
            "evals": keyed(self.evals),
            "total_steps": self.total_steps,
        }

    @classmethod
    def from_state(cls, st: dict) -> MetricsTally:
        """The tally `to_state` wrote (KeyError/TypeError/ValueError on anything else)."""
        t = cls()

        def keyed(d: dict, f=lambda v: v) -> dict:
            return {int(k): f(v) for k, v in d.items()}

        t.count, t.start_time, t.last_step = int(st["count"]), st["start_time"], int(st["last_step"])
        t.last_by_rank = keyed(st["last_by_rank"], int)
        t.loss_rank, t.last_loss = st["loss_rank"], st["last_loss"]
        t.losses_by_rank = keyed(st["losses_by_rank"], lambda v: deque(v, maxlen=HISTORY))
        t.loss_steps_by_rank = keyed(
            st["loss_steps_by_rank"], lambda v: deque((tuple(x) for x in v), maxlen=HISTORY)
        )
        t.step_times_rank0 = deque(st["step_times_rank0"], maxlen=HISTORY)
        t.slowest = keyed(st["slowest"], float)
        t.mem_by_step = keyed(st["mem_by_step"], tuple)
        t.ranks = keyed(st["ranks"], dict)
        t.world, t.mem, t.peak = int(st["world"]), st["mem"], st["peak"]
        t.waits = keyed(st["waits"], float)
        t.rounds = int(st["rounds"])
        t.node_by_rank = keyed(st["node_by_rank"], int)
        t.maxima = dict(st["maxima"])
        t.first_start = dict(st["first_start"])
        t.evals = keyed(st["evals"], float)
        t.total_steps = st["total_steps"] if isinstance(st.get("total_steps"), int) else None
        return t

    @classmethod
    def of(cls, records) -> MetricsTally:
        t = cls()
        for r in records:
            if valid_record(r):
                t.add(r)
        return t


class MetricsReader:
    """Reads metrics.jsonl from where it stopped, in bounded chunks: complete lines that are well-formed records
    go to `tally`; a partial last line waits for its end; anything else is counted in `skipped`."""

    def __init__(self, path: str | Path, *, index: bool = False):
        self.path = Path(path)
        self.offset = 0
        self.buffer = b""
        self.skipped = 0
        self.dropping = False  # inside a line over MAX_LINE (skipped once): dropped up to its newline
        self.tally = MetricsTally()
        # index: start from metrics.index.json where it matches the log (its bytes at the start and before the
        # offset it covers), and write it again every INDEX_EVERY bytes read. Only for readers that need the
        # tally alone: records before the index's offset are not read again (`on_record` does not see them).
        self.index = index
        self._indexed = -1  # the log offset the index on disk covers (-1: not looked at yet)

    @property
    def index_path(self) -> Path:
        return self.path.with_name(INDEX)

    def _fingerprint(self, fd: int, end: int) -> dict:
        head = os.pread(fd, min(_FP, end), 0)
        tail = os.pread(fd, min(_FP, end), max(0, end - _FP))
        return {
            "offset": end,
            "head": hashlib.sha256(head).hexdigest(),
            "tail": hashlib.sha256(tail).hexdigest(),
        }

    def _load_index(self, fd: int, size: int) -> None:
        """Resume from the index when it describes this log's first `offset` bytes; else read from the start."""
        self._indexed = 0
        try:
            p = self.index_path
            if not p.is_file() or p.stat().st_size > 64 << 20:
                return
            doc = json.loads(p.read_bytes())
            fp = doc["fingerprint"]
            if doc.get("schema") != INDEX_SCHEMA or not (0 < fp["offset"] <= size):
                return
            if self._fingerprint(fd, fp["offset"]) != fp:  # another log, or rewritten: the log wins
                return
            tally = MetricsTally.from_state(doc["tally"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return
        self.tally, self.skipped = tally, int(doc.get("skipped", 0))
        self.offset, self.buffer, self._indexed = fp["offset"], b"", fp["offset"]

    def _save_index(self, fd: int) -> None:
        end = self.offset - len(self.buffer)  # complete lines only
        if self.dropping or end - self._indexed < INDEX_EVERY:
            return
        doc = {
            "schema": INDEX_SCHEMA,
            "log": self.path.name,
            "fingerprint": self._fingerprint(fd, end),
            "skipped": self.skipped,
            "tally": self.tally.to_state(),
        }
        tmp = self.index_path.with_name(f".{INDEX}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(doc, separators=(",", ":")))
            os.replace(tmp, self.index_path)
            self._indexed = end
        except OSError:  # a read-only run directory: no index, same answers
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _lines(self, chunk: bytes):
        if self.dropping:  # the rest of an over-long line, up to its end
            self.dropping = (end := chunk.find(b"\n")) < 0
            chunk = b"" if self.dropping else chunk[end + 1 :]
        data = self.buffer + chunk
        lines = data.split(b"\n")
        self.buffer = lines.pop()
        if len(self.buffer) > MAX_LINE:  # no line is this long: garbage, counted once however long it runs
            self.skipped += 1
            self.buffer, self.dropping = b"", True
        return lines

    def read(self, keep: int = 1000, on_record=None) -> list[dict]:
        """Read what was appended; returns the newest `keep` new records (all of them go to the tally)."""
        new: deque = deque(maxlen=keep)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return []
            if st.st_size < self.offset:  # the file was replaced or truncated: start again
                self.offset, self.buffer = 0, b""
                self._indexed = min(self._indexed, 0)
            if self.index and self._indexed < 0 and self.offset == 0:
                self._load_index(fd, st.st_size)
            os.lseek(fd, self.offset, os.SEEK_SET)
            while True:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                self.offset += len(chunk)
                for line in self._lines(chunk):
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except (ValueError, RecursionError):  # truncated, garbage, or not UTF-8
                        self.skipped += 1
                        continue
                    if not valid_record(rec):
                        self.skipped += 1
                        continue
                    self.tally.add(rec)
                    if on_record is not None:
                        on_record(rec)
                    new.append(rec)
            if self.index:
                self._save_index(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
        return list(new)

    def finish(self) -> None:
        """At the end of a run: a last line without its newline is what a crash left half written."""
        if self.buffer.strip():
            self.skipped += 1
            self.buffer = b""
