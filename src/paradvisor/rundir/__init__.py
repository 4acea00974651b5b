"""The run contract: what a run directory holds, and the one place its file names are spelled.

The launcher (launch/), the trainer (train/), the monitor (monitor/) and the interfaces meet only here:

  rundir/__init__.py  `RunDir(path)`: the run directory's file names, creating a new one, reading a log's tail
  rundir/status.py    status.json: tolerant read (`read_status`, `effective_status`: a `Status`), private
                      atomic writes
  rundir/metrics.py   metrics.jsonl: the tolerant streamed reader and the tally the monitor shows
  rundir/records.py   `StepRecord`: a metrics.jsonl step line, shared by the writers and the readers
  rundir/prediction.py  `Prediction`: prediction.json
  rundir/dsconfig.py  the DeepSpeed config of a Plan (written by `--export hostfile`, used by the trainer)
What the run is (the Preset that plan.toml holds, its Plan and model) is spec/, below the advice.

Run directory (`runs/<timestamp>-<name>/`, mode 0700, every file 0600):
  .lock-nodeN          locked while node N's launch runs (two launches never write into one run directory)
  plan.toml            the preset as launched (CLI overrides applied)
  command.json/.txt    the exact argv
  launcher.log         torchrun's own output
  rank-N.stdout.log    each rank's stdout / stderr
  rank-N.stderr.log
  rank-N.exit.json     each rank's exit code and error (absent if it was killed)
  rank-N.pid           each rank's pid (stack dumps, reaping)
  metrics.jsonl        one JSON object per logged step per rank
  metrics.index.json   the readers' tally of the log's first N bytes (rundir/metrics.py; never trusted over it)
  summary.json         an ended run's `runs` entry, used while it matches the files (monitor/runcache.py)
  samples.jsonl        host and GPU readings of every node (monitor/sampler.py)
  prediction.json      what the run is compared with: the preset's prediction, else one computed at launch
  replan.toml          after an out-of-memory failure: the next plan that fits
  status.json          running | finished | failed | cancelled | interrupted, with the reason
  torchelastic-error-nodeN.json   torchrun's error file of node N
  ssh-nodeN.log, nodes.json       the ssh engine's session logs and node table (host, state, ranks)
Every file only node 0 (or a single-node run) writes is named plainly; node N's own status, command and
launcher log carry `-nodeN` (`node_file`). Every file here is written through `paradvisor.safeio` (never
through a link: `open_private`, `append_private`, `write_private`); an existing `--run-dir` is claimed with
`safeio.claim_dir` (this user's, not world-writable, holding no links); subfolders other libraries write
into (checkpoints, TensorBoard) are made with `safeio.private_subdir`.

Nothing here imports torch: the launcher's preflight, `--dry-run` and the monitor stay light.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import stat
from pathlib import Path

from paradvisor.errors import InputError

STATUS = "status.json"
PLAN = "plan.toml"
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
PREDICTION = "prediction.json"
REPLAN = "replan.toml"
COMMAND_TXT = "command.txt"
LAUNCHER_LOG = "launcher.log"
NODES = "nodes.json"
LINE_FILES = (METRICS, SAMPLES)  # appended line by line by every rank / node (the ssh engine merges them)


def node_file(kind: str, node_rank: int, suffixed: bool = False) -> str:
    """The name of a node's own file (kind: status, command, launcher) in a run directory that nodes may share:
    status.json / command.json / launcher.log for node 0, status-nodeN.json ... for the others, and for every
    node when `suffixed` (a Slurm job, whose status.json is the submitter's)."""
    ext = ".log" if kind == "launcher" else ".json"
    return f"{kind}{ext}" if node_rank == 0 and not suffixed else f"{kind}-node{node_rank}{ext}"


def launcher_log_name(node_rank: int, suffixed: bool = False) -> str:
    """torchrun's output of node `node_rank` in its run directory."""
    return node_file("launcher", node_rank, suffixed)


def rank_log_name(rank: int, stream: str) -> str:
    """rank-N.stdout.log / rank-N.stderr.log."""
    return f"rank-{rank}.{stream}.log"


def rank_exit_name(rank: int) -> str:
    return f"rank-{rank}.exit.json"


def torchelastic_error_name(node_rank: int) -> str:
    return f"torchelastic-error-node{node_rank}.json"


TORCHELASTIC_ERROR_PATTERN = r"torchelastic-error-node(\d+)\.json"


class RunDir:
    """The paths of one run directory's files (nothing is read or created by building one)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def status(self) -> Path:
        return self.path / STATUS

    @property
    def plan(self) -> Path:
        return self.path / PLAN

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def samples(self) -> Path:
        return self.path / SAMPLES

    @property
    def prediction(self) -> Path:
        return self.path / PREDICTION

    @property
    def replan(self) -> Path:
        return self.path / REPLAN

    @property
    def command_txt(self) -> Path:
        return self.path / COMMAND_TXT

    @property
    def nodes(self) -> Path:
        return self.path / NODES

    def node_file(self, kind: str, node_rank: int, suffixed: bool = False) -> Path:
        return self.path / node_file(kind, node_rank, suffixed)

    def node_status(self, node_rank: int) -> Path:
        """status-nodeN.json (a Slurm job's or another node's own status)."""
        return self.path / node_file("status", node_rank, True)

    def launcher_log(self, node_rank: int = 0, suffixed: bool = False) -> Path:
        return self.path / launcher_log_name(node_rank, suffixed)

    def rank_log(self, rank: int, stream: str = "stderr") -> Path:
        return self.path / rank_log_name(rank, stream)

    def rank_exit(self, rank: int) -> Path:
        return self.path / rank_exit_name(rank)

    def rank_pid(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.pid"

    def lock(self, node_rank: int) -> Path:
        return self.path / f".lock-node{node_rank}"

    def torchelastic_error(self, node_rank: int) -> Path:
        return self.path / torchelastic_error_name(node_rank)

    def ssh_log(self, node_index: int) -> Path:
        return self.path / f"ssh-node{node_index}.log"

    def is_run(self) -> bool:
        """Whether the folder holds a run (its status.json exists)."""
        return self.status.exists()


NAME_CHARS = "A-Za-z0-9._-"  # what a preset file name and a run directory name are made of
NAME_LEN = 60


def safe_name(text: str, fallback: str = "run") -> str:
    """The one name rule shared by a saved preset's file (`<name>.toml`) and its run directories
    (`<timestamp>-<name>`): letters, digits, '.', '_' and '-' (every other run of characters becomes '-'), at
    most 60 characters, never starting or ending with '-' or '.' (no hidden file, no '..')."""
    return re.sub(f"[^{NAME_CHARS}]+", "-", str(text))[:NAME_LEN].strip("-.") or fallback


def new_run_dir(runs_dir: Path, name: str) -> Path:
    """A new, private (0700) run directory `runs_dir/<timestamp>-<name>` (exclusive: two launches never share one)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    mode = runs_dir.stat().st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:  # anyone could rename a run folder away and plant one
        raise InputError(
            "is world-writable without the sticky bit; give a folder of yours", where=str(runs_dir)
        )
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = safe_name(name)
    for i in range(1000):
        d = runs_dir / (f"{stamp}-{safe}" + (f"-{i}" if i else ""))
        try:
            d.mkdir(mode=0o700)  # exclusive: two launches never share a directory
            return d
        except FileExistsError:
            continue
    raise InputError(f"could not create a run directory under {runs_dir}")


def read_tail(path: Path, limit: int = 1 << 20) -> str:
    """The last `limit` bytes of a log (a log can be huge, or not a regular file: never read it all)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def tail_lines(path: Path, n: int = 20) -> list[str]:
    """The last `n` lines of a log (from its last 64 KiB)."""
    return read_tail(path, 64 << 10).splitlines()[-n:]


def rank_process(run_dir: Path, rank: int):
    """The live process of `rank` from its rank-N.pid file, or None (gone, or the pid now belongs to a
    process that is not this run's)."""
    import psutil

    try:
        from paradvisor.safeio import read_bytes  # noqa: PLC0415 - start-up: `paradvisor --help` does not load it

        p = psutil.Process(int(read_bytes(RunDir(run_dir).rank_pid(rank), limit=64)))
        return p if str(run_dir) in " ".join(p.cmdline()) else None
    except (OSError, ValueError, InputError, psutil.Error):
        return None
