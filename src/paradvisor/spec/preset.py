"""Preset files: a Plan plus its workload (and where it runs), as TOML.

Read with tomllib, written with tomli-w, atomically (temporary file + rename), never over an
existing file unless asked to. Presets are data: nothing in them is ever executed.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path

import tomli_w

from paradvisor import __version__
from paradvisor.errors import InputError
from paradvisor.hardware.machines import ClusterRef
from paradvisor.limits import MAX_NAME
from paradvisor.shipped import presets_dir
from paradvisor.spec.plan import (
    CHECKPOINTING,
    OFFLOADS,
    PP_SCHEDULES,
    PP_SPLITS,
    PRECISIONS,
    SHARDINGS,
    Plan,
    Workload,
)
from paradvisor.tomlfile import KeyLocator, read_toml, without_none, write_toml_atomic
from paradvisor.typed import check_mapping, check_value, from_table
from paradvisor.units import parse_size

SCHEMA = "paradvisor.preset/1"


def cluster_file(preset) -> Path | None:
    """The cluster file the preset was planned on ([cluster].file), found as written (from the working
    folder) or beside the preset; None when the preset names none. The path as written when neither exists."""
    name = preset.cluster.get("file")
    if not name:
        return None
    given = Path(name).expanduser()
    for cand in (
        given,
        *([Path(preset.path).parent / given] if preset.path and not given.is_absolute() else []),
    ):
        if os.path.lexists(cand):
            return cand
    return given


def write_run_plan(path: str | os.PathLike, preset) -> Path:
    """A run directory's plan.toml: the preset as launched, headed by its plan's label (its cluster file named
    by an absolute path: a resume from another folder finds it)."""
    doc = preset.to_doc()
    found = cluster_file(preset)
    if found is not None and found.is_file():
        doc["cluster"] = {**doc.get("cluster", {}), "file": str(found.resolve())}
    return write_toml_atomic(path, doc, force=True, header=f"# paradvisor run plan: {preset.plan.label()}\n")


def plan_toml(preset) -> str:
    """The preset as plan.toml text (what a run directory, a ConfigMap or an sbatch script carries)."""
    return tomli_w.dumps(without_none(preset.to_doc()))


def save_preset(path: str | os.PathLike, doc: dict, *, force: bool = False) -> Path:
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = f"# paradvisor preset, written by paradvisor {__version__} on {stamp}\n"
    # --force replaces a preset only (as root, `--save /etc/passwd --force` replaced the user database)
    return write_toml_atomic(path, doc, force=force, header=header, replaces=f'schema = "{SCHEMA}"')


# ---------------------------------------------------------------------------------------------------
# Reading and validating presets.

DATASETS = ("corpus", "reviews", "imdb", "text", "files", "images")
PATH_DATASETS = ("files", "text", "imdb")  # the datasets that read train.data_path
LOCAL_HOSTS = ("localhost", "127.0.0.1")  # a launch host that is this machine
INITS = ("auto", "pretrained", "random")
_CLUSTER = {
    f.name for f in fields(ClusterRef)
}  # where the cluster came from: hardware/machines.py ClusterRef
_PLAN = {f for f in Plan.__dataclass_fields__}
# Predictions are numbers (a breakdown is a table of numbers); the monitor and the hang timeout compute with them.
_PREDICTION_TYPES = {
    "memory_per_gpu_bytes": float,
    "step_time_s": float,
    "samples_per_s": float,
    "tokens_per_s": float,
    "memory_breakdown": dict[str, float],
    "time_breakdown": dict[str, float],
}


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 20
    lr: float = 3e-4
    dataset: str = "corpus"
    data_path: str | None = None
    weights: str | None = None
    model_overrides: dict = field(default_factory=dict)
    seed: int = 0
    log_every: int = 1
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    device: str = "auto"
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    num_labels: int = 2
    image_size: int = 32
    # None: derived from the predicted step time (runner.hang_timeout); 0: off
    hang_timeout_s: float | None = None
    # Checkpoints (docs/resume.md): every N steps and/or every M minutes (None: the launcher picks an interval
    # from the prediction; 0: none but the one on a graceful stop), the newest k kept, DCP's async save.
    checkpoint_every: int | None = None
    checkpoint_minutes: float = 0.0
    keep_checkpoints: int = 3
    checkpoint_async: bool = True
    # Set by `launch --resume`: the checkpoint folder this run starts from; weights only with reset_optimizer.
    resume_from: str | None = None
    reset_optimizer: bool = False
    # The user's corpus (dataset = "files"; train/corpus.py) and its held-out part
    text_field: str = "text"
    eval_path: str | None = None
    eval_fraction: float = 0.0
    eval_every: int = 0  # steps between evals (0: only the final eval, when there is an eval part)
    eval_samples: int = 0  # samples per eval (0: the whole eval part)
    tokenizer: str | None = None  # a tokenizer folder or tokenizer.json (default: the model folder's own)
    init: str = "auto"  # pretrained | random | auto (pretrained when weights exist)
    # tokenized corpora (default $PARADVISOR_CACHE_DIR or ~/.cache/paradvisor/tokens)
    cache_dir: str | None = None
    # Set by the ssh engine on a node: the tokenized corpus its ranks read (launch/datacopy.py), not data_path
    tokenized: str | None = None
    tensorboard: bool = True  # event files in RUN_DIR/tensorboard/
    export_model: bool = True  # RUN_DIR/model/ (a Hugging Face folder) when the run finishes
    export_shard_size: str = "5GB"  # safetensors shards above this size, with an index


DEFAULT_RDZV_PORT = 29500  # torchrun's default; a multi-node rendezvous needs a port known in advance
ENGINES = ("auto", "local", "ssh")
DEFAULT_JOIN_TIMEOUT_S = (
    120.0  # a node that has not joined the rendezvous by then fails the run (torchrun: 600 s)
)


@dataclass(frozen=True)
class LaunchSettings:
    nproc_per_node: int = 1  # processes on each node (the largest node's count when node_procs is given)
    nnodes: int = 1
    node_procs: tuple[int, ...] = ()  # processes per node, in node-rank order, when nodes differ (2 + 4 GPUs)
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    hosts: tuple[str, ...] = ()
    master_port: int = 0
    backend: str = "auto"
    image: str = "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"
    memory_limit: str = ""  # per-process cap on CPU runs, e.g. "2 GiB" (address space beyond start-up)
    # How the nodes start: "local" (this machine is node `node_rank`), "ssh" (every node over ssh from here),
    # "auto" (ssh when there are several nodes with hosts, else local). See engine_of().
    engine: str = "auto"
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S  # torchrun --rdzv-conf join_timeout for multi-node runs
    # --submit slurm: cancel the job (a failed run) when it is still queued after this many seconds; 0 waits
    # as long as Slurm keeps it queued (a pending reason that can never clear fails at once either way)
    queue_timeout_s: float = 0.0
    # ssh engine: run directories on the nodes (<remote_dir>/<run>/node<N>)
    remote_dir: str = "~/paradvisor-runs"
    # ssh engine: the interpreter on the nodes that has paradvisor installed; by default the launcher's own
    # (scripts/install.sh puts it in the checkout's .venv: the same path on nodes that share the checkout's layout)
    remote_python: str = field(default_factory=lambda: sys.executable or "python3")
    max_restarts: int = 0  # a failed run restarts from its newest checkpoint this many times (re-planned)
    checkpoint_dir: str = ""  # a folder every node shares for checkpoints ("" : RUN_DIR/checkpoints)
    # Folders every node sees at the same path (NFS, a cluster file system): a --script under one of them is
    # started there on every node; any other script's folder is copied into each node's run folder.
    shared_paths: tuple[str, ...] = ()

    def procs(self, node_rank: int) -> int:
        """Processes torchrun starts on node `node_rank`."""
        return self.node_procs[node_rank] if self.node_procs else self.nproc_per_node

    @property
    def world(self) -> int:
        return sum(self.node_procs) if self.node_procs else self.nproc_per_node * self.nnodes

    def layout(self) -> str:
        """'2 nodes x 4 processes' or '2 + 4 processes on 2 nodes'."""
        if self.node_procs and len(set(self.node_procs)) > 1:
            return f"{' + '.join(map(str, self.node_procs))} processes on {self.nnodes} nodes"
        return f"{self.nnodes} node(s) x {self.nproc_per_node} process(es)"


SCRIPT_RUNTIMES = ("torch", "hf", "accelerate")  # what runs the user's own code (spec/capability.RUNTIMES)


@dataclass(frozen=True)
class ProgramSettings:
    """What torchrun starts on every rank: paradvisor's own trainer (nothing set), or the user's own code
    (`paradvisor launch --script FILE | --module M -- ARGS`), given `args` as its argv (never a shell)."""

    script: str = ""  # a Python file (absolute path)
    module: str = ""  # or a module, as `python -m`
    args: tuple[str, ...] = ()
    runtime: str = "torch"  # torch (a plain loop on runtime.device_mesh()) | hf | accelerate

    @property
    def own(self) -> bool:
        """Whether this is the user's own code rather than paradvisor's trainer."""
        return bool(self.script or self.module)

    @property
    def runtime_name(self) -> str:
        """The capability table's runtime: `paradvisor` for paradvisor's trainer."""
        return self.runtime if self.own else "paradvisor"

    def label(self) -> str:
        return self.script or f"-m {self.module}" if self.own else "paradvisor.train"


def engine_of(lau: LaunchSettings) -> str:
    """'ssh' (paradvisor starts every node over ssh) or 'local' (this machine runs node `node_rank`): an explicit
    launch.engine, else ssh when the launch has a host for each node and they are several or the one is not this
    machine (one node on `--hosts gpubox` ran here, the host ignored)."""
    if lau.engine != "auto":
        return lau.engine
    away = any(h not in LOCAL_HOSTS for h in lau.hosts)
    return "ssh" if len(lau.hosts) == lau.nnodes and (lau.nnodes > 1 or away) else "local"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    workload: Workload
    train: TrainSettings
    launch: LaunchSettings
    plan: Plan
    cluster: dict
    prediction: dict
    path: str | None = None
    program: ProgramSettings = ProgramSettings()

    def to_doc(self) -> dict:
        launch = asdict(self.launch)
        launch["hosts"] = list(self.launch.hosts)
        launch["node_procs"] = list(self.launch.node_procs)
        launch["shared_paths"] = list(self.launch.shared_paths)
        if not launch["shared_paths"]:
            del launch["shared_paths"]
        doc = {
            "schema": SCHEMA,
            "name": self.name,
            "description": self.description,
            "workload": self.workload.to_dict(),
            "train": asdict(self.train),
            "launch": launch,
            "cluster": self.cluster,
            "plan": self.plan.to_dict(),
            "prediction": self.prediction,
        }
        if self.program.own:
            doc["program"] = {k: v for k, v in asdict(self.program).items() if v}
            doc["program"]["args"] = list(self.program.args)
            doc["program"]["runtime"] = self.program.runtime
        return doc


@cache
def _keys(cls) -> frozenset[str]:
    """The keys of a preset table: the fields of the dataclass it becomes."""
    return frozenset(f.name for f in fields(cls))


def top_keys() -> frozenset[str]:
    """The top-level keys of a preset file: its tables and fields, and its schema (`path` is where it was read)."""
    return _keys(Preset) - {"path"} | {"schema"}


def _section(data: dict, name: str, allowed: frozenset, loc: KeyLocator) -> tuple[dict, callable]:
    sec = data.get(name, {})
    if not isinstance(sec, dict):
        raise InputError("expected a table", where=loc.where(None, 0, name, name))
    for k in sec:
        if k not in allowed:
            raise InputError(
                f"unknown key {k!r}; expected one of {', '.join(sorted(allowed))}",
                where=loc.where(name, 0, k, f"{name}.{k}"),
            )

    def where(key):
        return loc.where(name, 0, key, f"{name}.{key}")

    return sec, where


def parse_preset(data: dict, *, path: str = "<preset>", text: str = "") -> Preset:
    loc = KeyLocator(path, text)
    for k in data:
        if k not in top_keys():
            raise InputError(
                f"unknown key {k!r}; expected one of {', '.join(sorted(top_keys()))}",
                where=loc.where(None, 0, k, k),
            )
    if data.get("schema", SCHEMA) != SCHEMA:
        raise InputError(
            f"unsupported schema {data.get('schema')!r}; expected {SCHEMA!r}", where=f"{path}: schema"
        )
    # Every field of every section is checked against its dataclass annotation and bound (paradvisor.typed).
    workload = _parse_workload(*_section(data, "workload", _keys(Workload), loc))
    train = _parse_train(*_section(data, "train", _keys(TrainSettings), loc))
    launch = _parse_launch(*_section(data, "launch", _keys(LaunchSettings), loc))
    plan = _parse_plan(*_section(data, "plan", _PLAN, loc), workload.precision)
    program = parse_program(*_section(data, "program", _keys(ProgramSettings), loc))
    c, cw = _section(data, "cluster", _CLUSTER, loc)
    cluster = ClusterRef(**from_table(ClusterRef, c, cw)).to_doc()
    prediction = check_mapping(
        data.get("prediction", {}),
        _PREDICTION_TYPES,
        lambda k: loc.where("prediction", 0, k, f"prediction.{k}"),
        at=loc.where(None, 0, "prediction", "prediction"),
    )
    name = data.get("name") or Path(path).stem
    if not isinstance(name, str) or not name.isprintable() or len(name) > MAX_NAME:
        raise InputError(
            f"name must be a printable string of at most {MAX_NAME} characters",
            where=loc.where(None, 0, "name", "name"),
        )
    description = check_value(
        data.get("description", ""), str, loc.where(None, 0, "description", "description")
    )
    return Preset(
        name=name,
        description=description,
        workload=workload,
        train=train,
        launch=launch,
        plan=plan,
        cluster=cluster,
        prediction=prediction,
        path=path,
        program=program,
    )


def parse_program(p: dict, pw) -> ProgramSettings:
    prog = ProgramSettings(**from_table(ProgramSettings, p, pw))
    if prog.script and prog.module:
        raise InputError("give script or module, not both", where=pw("module"))
    if prog.runtime not in SCRIPT_RUNTIMES:
        raise InputError(
            f"runtime {prog.runtime!r}; expected one of {', '.join(SCRIPT_RUNTIMES)}", where=pw("runtime")
        )
    if p and not prog.own:
        raise InputError("a [program] section needs script or module", where=pw("script"))
    if prog.module and not all(part.isidentifier() for part in prog.module.split(".")):
        raise InputError(f"module {prog.module!r}: expected a dotted Python module name", where=pw("module"))
    if any("\0" in a for a in prog.args):
        raise InputError("an argument holds a NUL character", where=pw("args"))
    return prog


def _parse_workload(w: dict, ww) -> Workload:
    if "model" not in w:
        raise InputError("missing model (a built-in name or a HF config path)", where=ww("model"))
    workload = Workload(
        **{
            "seq_len": 128,
            "global_batch": 8,
            "precision": "fp32",
            "attention": "auto",  # the family's own pick (model/families/), resolved where the model is known
            **from_table(Workload, w, ww),
        }
    )
    if workload.precision not in ("auto", *PRECISIONS):
        raise InputError(
            f"precision {workload.precision!r}; expected auto or one of {', '.join(PRECISIONS)}",
            where=ww("precision"),
        )
    if workload.attention not in ("auto", "sdpa", "eager"):
        raise InputError("attention must be 'auto', 'sdpa' or 'eager'", where=ww("attention"))
    return workload


def _parse_train(t: dict, tw) -> TrainSettings:
    kw = from_table(TrainSettings, t, tw)
    if kw.get("dataset", "corpus") not in DATASETS:
        raise InputError(
            f"dataset {kw['dataset']!r}; expected one of {', '.join(DATASETS)}", where=tw("dataset")
        )
    if kw.get("device", "auto") not in ("auto", "cpu", "cuda"):
        raise InputError("device must be auto, cpu or cuda", where=tw("device"))
    if kw.get("dataset") in PATH_DATASETS and not kw.get("data_path"):
        raise InputError(f"dataset {kw['dataset']!r} needs data_path", where=tw("data_path"))
    if kw.get("init", "auto") not in INITS:
        raise InputError(f"init {kw['init']!r}; expected one of {', '.join(INITS)}", where=tw("init"))
    if not 0 <= kw.get("eval_fraction", 0.0) < 1:
        raise InputError("eval_fraction must be at least 0 and less than 1", where=tw("eval_fraction"))
    if kw.get("eval_path") and kw.get("eval_fraction"):
        raise InputError("give either eval_path or eval_fraction, not both", where=tw("eval_fraction"))
    if "export_shard_size" in kw:
        try:
            parse_size(kw["export_shard_size"])
        except (ValueError, InputError):
            raise InputError('expected a size such as "2GB"', where=tw("export_shard_size")) from None
    return TrainSettings(**kw)


def _parse_launch(lsec: dict, lw) -> LaunchSettings:
    lkw = from_table(LaunchSettings, lsec, lw)
    if lkw.get("node_procs"):
        if any(n < 1 or n > 1024 for n in lkw["node_procs"]):
            raise InputError(
                "node_procs must be a list of process counts (1..1024), one per node", where=lw("node_procs")
            )
        lkw.setdefault("nnodes", len(lkw["node_procs"]))
        lkw.setdefault("nproc_per_node", max(lkw["node_procs"]))
    launch = LaunchSettings(**lkw)
    if launch.node_procs and len(launch.node_procs) != launch.nnodes:
        raise InputError(
            f"node_procs lists {len(launch.node_procs)} nodes, nnodes is {launch.nnodes}",
            where=lw("node_procs"),
        )
    if launch.hosts and len(launch.hosts) != launch.nnodes:
        raise InputError(
            f"hosts lists {len(launch.hosts)} hosts for {launch.nnodes} node(s)", where=lw("hosts")
        )
    if launch.node_rank >= launch.nnodes:
        raise InputError(
            f"node_rank {launch.node_rank} must be below nnodes {launch.nnodes}", where=lw("node_rank")
        )
    if launch.memory_limit:
        try:
            parse_size(launch.memory_limit)
        except ValueError as exc:
            raise InputError(str(exc), where=lw("memory_limit")) from None
    if launch.backend not in ("auto", "gloo", "nccl"):
        raise InputError("backend must be auto, gloo or nccl", where=lw("backend"))
    if not 0 <= launch.master_port <= 65535:
        raise InputError("master_port must be 0..65535", where=lw("master_port"))
    if launch.engine not in ENGINES:
        raise InputError(
            f"engine {launch.engine!r}; expected one of {', '.join(ENGINES)}", where=lw("engine")
        )
    if launch.engine == "ssh" and not launch.hosts:
        raise InputError('engine = "ssh" needs one host per node in launch.hosts', where=lw("hosts"))
    for key in ("remote_dir", "remote_python"):
        if not getattr(launch, key).strip():
            raise InputError("must not be empty", where=lw(key))
    return launch


def plan_keys(p: dict, pw) -> dict:
    """The given keys of a plan table, each checked against Plan's annotation and its allowed values (unknown
    keys name what is expected); keys left out stay out (callers fill their own defaults)."""
    for k in p:
        if k not in _PLAN:
            raise InputError(f"unknown key {k!r}; expected one of {', '.join(sorted(_PLAN))}", where=pw(k))
    pkw = from_table(Plan, p, pw)
    for key, allowed in (
        ("sharding", SHARDINGS),
        ("checkpointing", CHECKPOINTING),
        ("precision", PRECISIONS),
        ("offload", OFFLOADS),
        ("pp_schedule", PP_SCHEDULES),
        ("pp_split", PP_SPLITS),
    ):
        if key in pkw and pkw[key] not in allowed:
            raise InputError(f"{pkw[key]!r}; expected one of {', '.join(allowed)}", where=pw(key))
    return pkw


def _parse_plan(p: dict, pw, precision: str) -> Plan:
    """The plan section; its precision defaults to the workload's (fp32 for `auto`)."""
    pkw = plan_keys(p, pw)
    if "precision" not in pkw:
        pkw["precision"] = precision if precision != "auto" else "fp32"
    return Plan(**pkw)


REPO_PRESETS = Path(__file__).resolve().parents[3] / "presets"  # the checkout's shipped presets


def user_presets_dir() -> Path:
    """The user's preset folder, where the interactive session saves presets:
    $XDG_CONFIG_HOME/paradvisor/presets (~/.config/paradvisor/presets)."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "paradvisor" / "presets"


def preset_dirs() -> list[Path]:
    """Where preset names are looked up: ./presets, the user's preset folder, then the shipped presets."""
    out = []
    for d in (Path("presets"), user_presets_dir(), REPO_PRESETS, presets_dir()):
        if d.is_dir() and all(d.resolve() != o.resolve() for o in out):
            out.append(d)
    return out


def preset_names() -> list[str]:
    return sorted({p.stem for d in preset_dirs() for p in d.glob("*.toml")})


def resolve_preset(ref: str) -> Path:
    """A preset given as a file path, or by name (`tiny-cpu-smoke` or `tiny-cpu-smoke.toml`) from ./presets,
    the user's preset folder (where the interactive session saves) or the shipped presets. InputError listing
    the names there when it is neither."""
    path = Path(ref)
    if path.exists():
        return path
    if "/" not in ref and ref not in ("", ".", ".."):
        stem = ref.removesuffix(".toml")
        for d in preset_dirs():
            cand = d / f"{stem}.toml"
            if cand.is_file():
                return cand
    names = preset_names()
    raise InputError(
        f"no preset {ref!r}: not a file, and no {Path(ref).stem}.toml in ./presets, {user_presets_dir()} "
        "or the shipped presets" + (f"; presets: {', '.join(names)}" if names else ""),
        where="--preset",
    )


def load_preset(path: str | os.PathLike) -> Preset:
    data, text = read_toml(path)
    return parse_preset(data, path=str(path), text=text)
