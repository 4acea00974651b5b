"""Run a Preset for real: validate, create the run directory, start torchrun in its own process
group, watch it, and record what happened in status.json.

Run directory (`runs/<timestamp>-<name>/`, mode 0700, every file 0600):
  .lock-nodeN          locked while node N's launch runs (two launches never write into one run directory)
  plan.toml            the preset as launched (CLI overrides applied)
  command.json/.txt    the exact argv
  launcher.log         torchrun's own output
  rank-N.stdout.log    each rank's stdout / stderr
  rank-N.stderr.log
  rank-N.exit.json     each rank's exit code and error (absent if it was killed)
  metrics.jsonl        one JSON object per logged step per rank
  prediction.json      what the run is compared with: the preset's prediction, else one computed at launch
  status.json          running | finished | failed | cancelled | interrupted, with the reason
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch.argv import check_port_free, free_port, split_endpoint, torchrun_argv
from paradvisor.launch.preset import Preset, write_toml_atomic
from paradvisor.limits import MAX_TIMEOUT_S

TERMINAL = ("finished", "failed", "cancelled", "interrupted")


def write_private(path: Path, text: str) -> None:
    """Write a run file atomically with mode 0600 (whatever the umask or the folder's mode). The temporary
    name is the writer's own (process and thread): two threads (the ssh engine's node sessions) or two
    processes writing the same file each rename a whole file, the last one wins."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, doc: dict) -> None:
    from paradvisor.safeio import finite

    write_private(path, json.dumps(finite(doc), indent=2, default=str, allow_nan=False))


def validate(preset: Preset, *, reach: bool = True) -> None:
    """Everything that can be checked before a process starts (exit 2 on failure). `reach=False` (dry runs,
    exports) skips what depends on this machine: the ssh reachability of the hosts (their names are still
    checked) and whether this machine's device can run the plan (FSDP CPU offload needs a GPU)."""
    from paradvisor.train.data import check_data_path

    plan, lau, wl = preset.plan, preset.launch, preset.workload
    where = preset.path or "preset"
    from paradvisor.train.faults import from_env

    try:
        from_env()
    except ValueError as exc:
        raise InputError(str(exc)) from None
    world = lau.world
    if plan.world_size != world:
        raise InputError(f"plan dp x tp x pp = {plan.dp} x {plan.tp} x {plan.pp} = {plan.world_size}, but the launch "
                         f"starts {lau.layout()} = {world} processes", where=f"{where}: plan")
    if plan.diloco:
        if plan.nodes and sum(n.gpus for n in plan.nodes) != world:
            raise InputError(f"plan.nodes cover {sum(n.gpus for n in plan.nodes)} GPUs, the launch starts {world}",
                             where=f"{where}: plan.nodes")
    elif plan.split_by_speed:
        if len(plan.rank_batches) != plan.dp:
            raise InputError(f"rank_batches has {len(plan.rank_batches)} entries for {plan.dp} data ranks",
                             where=f"{where}: plan.rank_batches")
        if sum(plan.rank_batches) * plan.grad_accum != wl.global_batch:
            raise InputError(f"sum(rank_batches) x grad_accum = {sum(plan.rank_batches) * plan.grad_accum} "
                             f"!= global_batch {wl.global_batch}", where=f"{where}: plan")
    elif plan.micro_batch * plan.grad_accum * plan.dp != wl.global_batch:
        raise InputError(f"micro_batch x grad_accum x dp = {plan.micro_batch} x {plan.grad_accum} x {plan.dp} != "
                         f"global_batch {wl.global_batch}", where=f"{where}: plan")
    from paradvisor.train.models import profile_of, resolved_config

    family, _ = resolved_config(preset)
    prof = profile_of(preset)
    s = prof.transformer
    check_plan_shape(preset, family, prof, reach=reach)
    check_data_path(preset.train.dataset, preset.train.data_path)
    if preset.train.weights and not Path(preset.train.weights).exists():
        raise InputError("weights path does not exist", where=f"{where}: train.weights")
    if lau.nnodes > 1 and not lau.rdzv_endpoint:
        raise InputError("a multi-node launch needs launch.rdzv_endpoint = \"HOST:PORT\" (or --rdzv-endpoint)",
                         where=f"{where}: launch")
    hosts = [h for h in lau.hosts if h not in ("localhost", "127.0.0.1")]
    if hosts:
        from paradvisor.hardware.remote import check_reachable, parse_host

        for h in hosts:  # every host string is checked before any ssh runs
            try:
                parse_host(h)
            except InputError as exc:
                raise InputError(str(exc), where=f"{where}: launch.hosts") from None
        for h in hosts if reach else ():
            ok, why = check_reachable(h)
            if not ok:
                raise InputError(f"host {h} is unreachable: {why}", where=f"{where}: launch.hosts")


def check_plan_shape(preset: Preset, family: str, prof, *, reach: bool = True) -> None:
    """The plan against the capability table (plan/capability.py, the same table the search reads), the
    model's shape and the launch section: degrees divide heads/layers, TP groups stay inside a node."""
    from paradvisor.plan.capability import why_not

    plan, lau = preset.plan, preset.launch
    where = preset.path or "preset"
    why = why_not(plan, family)
    if why:
        raise InputError(why, where=f"{where}: plan")
    s = prof.transformer
    if plan.tp > 1 and s is None:
        raise InputError(f"{prof.name} is not a transformer: no tensor-parallel plan", where=f"{where}: plan.tp")
    if plan.tp > 1:
        for what, n in (("attention heads", s.heads), ("KV heads", s.kv_heads), ("FFN width", s.ffn)):
            if n % plan.tp:
                raise InputError(f"TP degree {plan.tp} does not divide {prof.name}'s {n} {what}",
                                 where=f"{where}: plan.tp")
        for r in range(lau.nnodes):
            if lau.procs(r) % plan.tp:
                raise InputError(f"TP degree {plan.tp} does not divide node {r}'s {lau.procs(r)} processes: a TP "
                                 "group must stay inside one node", where=f"{where}: plan.tp")
    if plan.pp > 1:
        if s is None or s.shared_layers:
            raise InputError(f"{prof.name} has no stack of separate blocks to cut into pipeline stages",
                             where=f"{where}: plan.pp")
        if s.num_layers % plan.pp:
            raise InputError(f"PP degree {plan.pp} does not divide {prof.name}'s {s.num_layers} layers",
                             where=f"{where}: plan.pp")
        from paradvisor.plan.space import schedule_ok

        if not schedule_ok(plan):
            raise InputError(f"a {plan.pp}-stage 1F1B pipeline needs at least {plan.pp} micro-batches per step, the "
                             f"plan has grad_accum = {plan.grad_accum} (GPipe runs with fewer)",
                             where=f"{where}: plan.grad_accum")
    if plan.ep > 1:
        experts = s.num_experts if s is not None and s.is_moe else 0
        if not experts:
            raise InputError(f"{prof.name} has no experts to split over EP ranks", where=f"{where}: plan.ep")
        if experts % plan.ep:
            raise InputError(f"EP degree {plan.ep} does not divide {prof.name}'s {experts} experts",
                             where=f"{where}: plan.ep")
    if plan.sequence_parallel and s is not None and preset.workload.seq_len % plan.tp:
        raise InputError(f"sequence parallelism splits the sequence over TP {plan.tp}: seq_len {preset.workload.seq_len} "
                         f"is not a multiple of it", where=f"{where}: workload.seq_len")
    if reach and plan.sharding == "fsdp" and plan.offload != "none" and (preset.train.device == "cpu" or
                                                               (preset.train.device == "auto" and not _has_cuda())):
        raise InputError("FSDP CPU offload needs a GPU: FSDP2's CPUOffloadPolicy copies shards to the accelerator to "
                         "compute (on CPU-only machines use ZeRO-3 offload)", where=f"{where}: plan.offload")
    if plan.sharding == "hsdp":
        shard = hsdp_shard_size(preset)
        if shard < 1 or plan.dp % shard:
            raise InputError(f"HSDP shards over each node's {shard} processes, which must divide dp = {plan.dp}",
                             where=f"{where}: plan.sharding")
    if plan.diloco and plan.nodes and lau.nnodes > 1:
        counts = [n.gpus for n in plan.nodes]
        if counts != [lau.procs(r) for r in range(lau.nnodes)]:
            raise InputError(f"plan.nodes have {counts} GPUs, the launch starts "
                             f"{[lau.procs(r) for r in range(lau.nnodes)]} processes per node",
                             where=f"{where}: plan.nodes")


def hsdp_shard_size(preset: Preset) -> int:
    """HSDP shards inside a node and replicates across nodes: the shard group is a node's process count
    (from plan.nodes, else the launch's per-node count; a single-node run shards over half its ranks)."""
    plan, lau = preset.plan, preset.launch
    if plan.nodes:
        return int(plan.nodes[0].gpus)
    if lau.nnodes > 1:
        return lau.procs(0)
    return max(1, plan.world_size // 2)


def endpoint_for(preset: Preset) -> tuple[str, Preset]:
    lau = preset.launch
    if lau.rdzv_endpoint:
        host, port = split_endpoint(lau.rdzv_endpoint)
        if lau.node_rank == 0 and host in ("127.0.0.1", "localhost", "0.0.0.0"):
            check_port_free(host, port)
        return lau.rdzv_endpoint, preset
    port = lau.master_port or free_port()
    if lau.master_port:
        check_port_free("127.0.0.1", port)
    return f"127.0.0.1:{port}", replace(preset, launch=replace(lau, master_port=port))


def new_run_dir(runs_dir: Path, name: str) -> Path:
    runs_dir.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name)[:60] or "run"
    for i in range(1000):
        d = runs_dir / (f"{stamp}-{safe}" + (f"-{i}" if i else ""))
        try:
            d.mkdir(mode=0o700)  # exclusive: two launches never share a directory
            return d
        except FileExistsError:
            continue
    raise InputError(f"could not create a run directory under {runs_dir}")


def _read_tail(path: Path, limit: int = 1 << 20) -> str:
    """The last `limit` bytes of a log (a log can be huge, or not a regular file: never read it all)."""
    import stat

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


def _tail(path: Path, n: int = 20) -> list[str]:
    return _read_tail(path, 64 << 10).splitlines()[-n:]


PEER_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe", "connection refused",
               "remote worker", "communicator was aborted", "socket timeout", "recvbytes", "sendbytes",
               "the paradvisor launcher")


def is_peer_error(error: str | None) -> bool:
    """An error a rank gets because another rank (or the launcher) went away first."""
    e = (error or "").lower()
    return any(p in e for p in PEER_ERRORS)


AGENT_ERRORS = re.compile(r"Rendezvous\w*Error|DistNetworkError|DistStoreError|EADDRINUSE|address already in use",
                          re.IGNORECASE)


def _agent_failure(run_dir: Path, returncode: int, log: str, codes: dict, agent_pid: int | None,
                   log_name: str = "launcher.log") -> dict | None:
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
    return {"failed_rank": None, "failed_process": "torchrun agent", "exit_code": returncode, "reason": reason,
            "last_log_lines": _tail(run_dir / log_name),
            "rank_exit_codes": {str(r): d.get("exit_code") for r, d in sorted(codes.items())}}


def node_file(kind: str, node_rank: int, suffixed: bool = False) -> str:
    """The name of a node's own file (kind: status, command, launcher) in a run directory that nodes may share:
    status.json / command.json / launcher.log for node 0, status-nodeN.json ... for the others, and for every
    node when `suffixed` (a Slurm job, whose status.json is the submitter's)."""
    ext = ".log" if kind == "launcher" else ".json"
    return f"{kind}{ext}" if node_rank == 0 and not suffixed else f"{kind}-node{node_rank}{ext}"


def launcher_log_name(node_rank: int, suffixed: bool = False) -> str:
    """torchrun's output of node `node_rank` in its run directory."""
    return node_file("launcher", node_rank, suffixed)


def diagnose(run_dir: Path, world: int, returncode: int, agent_pid: int | None = None, node_rank: int = 0,
             log_name: str | None = None) -> dict:
    """Which rank (or the torchrun agent) failed, with what exit code or signal, and its last log lines."""
    from paradvisor.runfiles import read_json_object

    codes = {}
    for r in range(world):
        f = run_dir / f"rank-{r}.exit.json"
        if f.exists():
            doc, _ = read_json_object(f)
            if doc is not None and isinstance(doc.get("exit_code", 0), int) and isinstance(doc.get("time", 0),
                                                                                           (int, float)):
                codes[r] = {**doc, "error": str(doc["error"]) if doc.get("error") is not None else None}
    log_name = log_name or launcher_log_name(node_rank)
    log = _read_tail(run_dir / log_name)
    agent = _agent_failure(run_dir, returncode, log, codes, agent_pid, log_name)
    if agent is not None:
        return agent
    failed_rank, exit_code, reason = None, returncode, None
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
    own = sorted((d.get("time", 0), r) for r, d in codes.items()
                 if d.get("exit_code") and not is_peer_error(d.get("error")))
    killed = [(r, c) for r, c in silent if c < 0]
    if killed:
        failed_rank, exit_code = killed[0]
    elif own:
        failed_rank = own[0][1]
        exit_code = codes[failed_rank]["exit_code"]
    elif silent:
        failed_rank, exit_code = silent[0]
    elif m:
        failed_rank, exit_code = int(m.group(1)), int(m.group(2))
    else:
        bad = sorted((d.get("time", 0), r) for r, d in codes.items() if d.get("exit_code"))
        here = [r for r in range(world) if (run_dir / f"rank-{r}.pid").exists()] or range(world)  # this node's
        missing = [r for r in here if r not in codes]
        if bad:
            failed_rank = bad[0][1]
            exit_code = codes[failed_rank]["exit_code"]
        elif missing:
            failed_rank = missing[0]
    if failed_rank in codes and codes[failed_rank].get("error"):
        reason = codes[failed_rank]["error"]
    elif exit_code is not None and exit_code < 0:
        try:
            reason = f"killed by signal {signal.Signals(-exit_code).name}"
        except ValueError:
            reason = f"killed by signal {-exit_code}"
    lines = _tail(run_dir / f"rank-{failed_rank}.stderr.log") if failed_rank is not None else _tail(run_dir / log_name)
    if not reason:
        reason = next((ln for ln in reversed(lines) if ln.strip()), f"exit code {returncode}")
    return {"failed_rank": failed_rank, "exit_code": exit_code, "reason": reason, "last_log_lines": lines,
            "rank_exit_codes": {str(r): d.get("exit_code") for r, d in sorted(codes.items())}}


HANG_DUMP_WAIT_S = 3.0
HANG_FLOOR_S = 300.0  # a derived hang timeout is at least this (CPU runs are far slower than GPU predictions)
HANG_FACTOR = 10.0  # ... and this many times the predicted (and, while running, the longest seen) record interval


def hang_timeout(preset: Preset) -> tuple[float, str]:
    """(seconds without a new metrics record before the run is called hung (0: off), how that was decided).
    Hang detection is on by default: train.hang_timeout_s unset derives the timeout from the predicted step
    time and the log interval; 0 turns it off."""
    t = preset.train.hang_timeout_s
    if t is not None:
        return t, (f"hang detection after {t:g} s without progress (train.hang_timeout_s)" if t
                   else "hang detection off (train.hang_timeout_s = 0)")
    step = preset.prediction.get("step_time_s") or 0.0
    every = preset.train.log_every
    if preset.plan.diloco:  # a node may wait a whole round of the slowest node's local steps at an outer sync
        every = max(every, max([preset.plan.local_steps or 1, *(n.local_steps or 1 for n in preset.plan.nodes)]))
    t = min(MAX_TIMEOUT_S, max(HANG_FLOOR_S, HANG_FACTOR * step * every))
    basis = (f"{HANG_FACTOR:g} x predicted step {step:.3g} s x log interval {every}, at least {HANG_FLOOR_S:g} s"
             if step else f"no predicted step time: the {HANG_FLOOR_S:g} s floor")
    return t, (f"hang detection: {t:g} s without progress stops the run ({basis}; grows with the slowest interval "
               "seen; --hang-timeout S sets it, 0 turns it off)")


def _rank_process(run_dir: Path, rank: int):
    """The live process of `rank` from its rank-N.pid file, or None (gone, or the pid now belongs to a
    process that is not this run's)."""
    import psutil

    try:
        p = psutil.Process(int((run_dir / f"rank-{rank}.pid").read_text()))
        return p if str(run_dir) in " ".join(p.cmdline()) else None
    except (OSError, ValueError, psutil.Error):
        return None


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

    logs = {r: run_dir / f"rank-{r}.stderr.log" for r in range(world)}
    sizes = {r: log.stat().st_size if log.exists() else 0 for r, log in logs.items()}
    asked = []
    for r in range(world):
        proc = _rank_process(run_dir, r)
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


def hang_report(run_dir: Path, stacks: dict[int, list[str] | None], hang: float, rc: int, world: int,
                log_name: str = "launcher.log") -> dict:
    d = diagnose(run_dir, world, rc, log_name=log_name)
    suspects = hang_suspects(stacks)
    from paradvisor.monitor.follow import MetricsFollower

    follower = MetricsFollower(run_dir)
    follower.poll(keep=0)
    last = follower.records.last_by_rank
    steps = ", ".join(f"rank {r} step {last.get(r, 0)}" for r in range(world))
    failed = suspects[0] if len(suspects) == 1 else None
    who = (f"rank {failed} stopped making progress, the others waited for it" if failed is not None
           else "no single rank to blame")
    reason = f"no progress for {hang:g} s (hung): {who}; last logged: {steps}; all ranks stopped"
    frames = _main_thread_frames(stacks[failed] or []) if failed is not None else []
    lines = (["(the rank did not answer the stack request)"] if failed is not None and stacks[failed] is None
             else frames or d["last_log_lines"])
    return {**d, "failed_rank": failed, "exit_code": None, "reason": reason, "hung": True,
            "hang_suspects": suspects, "last_steps": {str(r): last.get(r, 0) for r in range(world)},
            "last_log_lines": lines,
            "stacks": {str(r): _main_thread_frames(v) if v else None for r, v in sorted(stacks.items())}}


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _reap_ranks(run_dir: Path, world: int) -> None:
    """Belt and braces: no rank outlives its run (a rank that escaped the process group is killed)."""
    import psutil

    for r in range(world):
        proc = _rank_process(run_dir, r)
        if proc is not None:
            try:
                proc.kill()
            except psutil.Error:
                continue


class Launch:
    """A started run: `wait()` blocks until it ends and returns the final status document."""

    def __init__(self, preset: Preset, run_dir: Path, argv: list[str], proc: subprocess.Popen, status_name: str,
                 locks: list | None = None, log_name: str = "launcher.log"):
        self.preset, self.run_dir, self.argv, self.proc = preset, run_dir, argv, proc
        self.log_name = log_name
        self.status_path = run_dir / status_name
        self.cancel_requested = False
        self.cancel_reason = "stopped by the user"
        self.started = time.time()
        self.done = threading.Event()  # set once the final status is written
        self.locks = locks or []  # the run directory's (and a fixed port's) lock, held until the run ends
        self.hang_timeout_s, self.hang_detection = hang_timeout(preset)
        import psutil

        # The identity of the processes that keep the run going: a pid alone may be reused once they are gone.
        self.identity = {"launcher_pid": os.getpid(), "launcher_started": psutil.Process().create_time()}
        try:
            self.identity.update(pid_started=psutil.Process(proc.pid).create_time())
        except psutil.Error:
            pass

    def cancel(self, reason: str = "stopped by the user") -> None:
        if not self.cancel_requested:
            self.cancel_reason = reason
        self.cancel_requested = True

    def status(self, **kw) -> dict:
        doc = {"schema": "paradvisor.status/1", "status": "running", "run_dir": str(self.run_dir),
               "name": self.preset.name, "pid": self.proc.pid, "started": self.started,
               "world_size": self.preset.plan.world_size, "node_rank": self.preset.launch.node_rank,
               "label": self.preset.plan.label(), "command": self.argv, **self.identity,
               "hang_timeout_s": self.hang_timeout_s or None, "hang_detection": self.hang_detection}
        doc.update(kw)
        return doc

    def wait(self, poll: float = 0.2) -> dict:
        try:
            return self._wait(poll)
        finally:
            for lock in self.locks:
                lock.close()
            self.done.set()

    def _wait(self, poll: float) -> dict:
        hang = self.hang_timeout_s
        derived = self.preset.train.hang_timeout_s is None
        metrics = self.run_dir / "metrics.jsonl"
        # The hang clock starts with the first metrics record: start-up (rendezvous, imports, model build)
        # is bounded by the process group's own timeout instead, so a slow start is not called a hang.
        last_progress = time.monotonic()
        last_size = 0
        hung = None
        from paradvisor.monitor.sampler import SampleLog

        samples = SampleLog(self.run_dir, self.preset.launch.node_rank)
        while self.proc.poll() is None:
            samples.tick()
            if self.cancel_requested:
                _kill_group(self.proc)
                break
            if hang:
                try:
                    size = metrics.stat().st_size
                except OSError:
                    size = 0
                if size != last_size:
                    now = time.monotonic()
                    if derived and last_size:  # a derived timeout also stays 10x above the slowest interval seen
                        hang = min(MAX_TIMEOUT_S, max(hang, HANG_FACTOR * (now - last_progress)))
                    last_size, last_progress = size, now
                elif size and time.monotonic() - last_progress > hang:
                    hung = dump_stacks(self.run_dir, self.preset.plan.world_size)
                    _kill_group(self.proc)
                    break
            time.sleep(poll)
        rc = self.proc.wait()
        samples.close()
        _reap_ranks(self.run_dir, self.preset.plan.world_size)
        ended = time.time()
        common = {"ended": ended, "duration_s": ended - self.started, "returncode": rc}
        if self.cancel_requested:
            doc = self.status(status="cancelled", reason=self.cancel_reason, **common)
        elif hung is not None:
            report = hang_report(self.run_dir, hung, hang, rc, self.preset.plan.world_size, self.log_name)
            doc = self.status(status="failed", **report, **common)
        elif rc == 0:
            doc = self.status(status="finished", **common)
        else:
            doc = self.status(status="failed", **diagnose(self.run_dir, self.preset.plan.world_size, rc,
                                                          self.proc.pid, log_name=self.log_name), **common)
            from paradvisor.launch.replan import is_oom, write_replan

            if is_oom(doc.get("reason", "")) or any(is_oom(x) for x in doc.get("last_log_lines", [])):
                doc["oom"] = True
                try:
                    doc["replan"] = write_replan(self.run_dir, self.preset)
                except Exception as exc:  # a re-plan is advice: never let it hide the failure itself
                    doc["replan_error"] = f"{type(exc).__name__}: {exc}"
        write_json_atomic(self.status_path, doc)
        return doc


def _lock(path: Path, what: str):
    """An exclusive lock on `path` (created 0600), held while the returned file stays open; InputError naming the
    launch that holds it otherwise."""
    import fcntl

    try:
        f = open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600), "r+")  # noqa: SIM115 (held)
    except OSError as exc:
        raise InputError(f"cannot lock {what}: {exc.strerror or exc}", where=str(path)) from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = f.read().strip() or "another process"
        f.close()
        raise InputError(f"{what} is in use by another launch ({holder}); wait for it to end or pick another",
                         where=str(path)) from None
    f.truncate(0)
    f.write(f"paradvisor pid {os.getpid()}")
    f.flush()
    return f


def prepare_run_dir(run_dir: Path | None, runs_dir: Path, preset: Preset, *, suffixed: bool = False,
                    lock_name: str | None = None) -> tuple[Path, list]:
    """The run directory (new under `runs_dir`, or the given one, made private: mode 0700) and its lock for this
    node: two launches never write into one run directory at the same time, and a directory that already
    holds this node's run is not reused (its metrics would mix)."""
    lau = preset.launch
    try:
        if run_dir is None:
            run_dir = new_run_dir(Path(runs_dir), preset.name)
        else:
            run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if run_dir.stat().st_uid == os.getuid():
                os.chmod(run_dir, 0o700)
    except OSError as exc:
        raise InputError(f"cannot use this run directory: {exc.strerror or exc}",
                         where=str(exc.filename or run_dir or runs_dir)) from None
    locks = [_lock(run_dir / (lock_name or f".lock-node{lau.node_rank}"), "this run directory")]
    status = run_dir / node_file("status", lau.node_rank, suffixed)
    if status.exists():
        locks[0].close()
        raise InputError("already holds a run (its status file exists); give a new --run-dir", where=str(run_dir))
    return run_dir, locks


def _port_lock(endpoint: str, preset: Preset):
    """A fixed port on this machine is held by one paradvisor launch at a time (two launches given the same
    master_port would otherwise join one rendezvous). None for a free port picked here."""
    import tempfile

    host, port = split_endpoint(endpoint)
    if host not in ("127.0.0.1", "localhost", "0.0.0.0") or preset.launch.node_rank != 0:
        return None
    d = Path(tempfile.gettempdir()) / f"paradvisor-{os.getuid()}-ports"
    d.mkdir(mode=0o700, exist_ok=True)
    return _lock(d / f"{port}.lock", f"port {port}")


def start(preset: Preset, *, runs_dir: Path, run_dir: Path | None = None, env: dict | None = None,
          ssh_config: str | None = None, ssh_timeout: float | None = None, run_id: str | None = None,
          reach: bool = True, is_host: bool | None = None, suffixed: bool = False):
    """Start a run: this machine's node (engine local), or every node over ssh (engine ssh: launch/sshrun.py,
    whose SshLaunch has the same wait/cancel/done/run_dir). `run_id` names the rendezvous (default: the run
    directory's name); `is_host` tells torchrun whether this node serves the rendezvous store; `suffixed` names
    even node 0's status, command and launcher log per node (node_file: a Slurm job's nodes)."""
    from paradvisor.launch.preset import engine_of

    if engine_of(preset.launch) == "ssh":
        from paradvisor.launch import sshrun

        return sshrun.start(preset, runs_dir=runs_dir, run_dir=run_dir, env=env, ssh_config=ssh_config,
                            ssh_timeout=ssh_timeout)
    validate(preset, reach=reach)
    endpoint, preset = endpoint_for(preset)
    port_lock = _port_lock(endpoint, preset) if (preset.launch.master_port or preset.launch.rdzv_endpoint) else None
    try:
        run_dir, locks = prepare_run_dir(run_dir, runs_dir, preset, suffixed=suffixed)
    except BaseException:
        if port_lock:
            port_lock.close()
        raise
    if port_lock:
        locks.append(port_lock)
    lau = preset.launch
    argv = torchrun_argv(str(run_dir), nproc_per_node=lau.procs(lau.node_rank), nnodes=lau.nnodes,
                         node_rank=lau.node_rank, endpoint=endpoint, run_id=run_id or run_dir.name,
                         join_timeout_s=lau.join_timeout_s, is_host=is_host)
    status_name = node_file("status", lau.node_rank, suffixed)
    if (lau.node_rank == 0 and not suffixed) or not (run_dir / "plan.toml").exists():
        write_toml_atomic(run_dir / "plan.toml", preset.to_doc(), force=True,
                          header=f"# paradvisor run plan: {preset.plan.label()}\n")
    if lau.node_rank == 0 and not suffixed:  # every run carries a prediction (monitor/predict.py)
        from paradvisor.monitor.predict import launch_prediction

        write_json_atomic(run_dir / "prediction.json", launch_prediction(preset))
    write_json_atomic(run_dir / node_file("command", lau.node_rank, suffixed),
                      {"argv": argv, "cwd": os.getcwd()})
    if not suffixed:
        write_private(run_dir / "command.txt", shlex.join(argv) + "\n")  # pasted into a shell, it runs only this
    import psutil

    from paradvisor.train.faults import LAUNCHER_PID_ENV, LAUNCHER_START_ENV

    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                LAUNCHER_PID_ENV: str(os.getpid()), LAUNCHER_START_ENV: repr(psutil.Process().create_time()),
                "TORCHELASTIC_ERROR_FILE": str(run_dir / f"torchelastic-error-node{lau.node_rank}.json"),
                **(env or {})}
    if preset.train.device == "cpu":
        full_env["CUDA_VISIBLE_DEVICES"] = ""
        full_env["DS_ACCELERATOR"] = "cpu"
    elif not _has_cuda():
        full_env.setdefault("DS_ACCELERATOR", "cpu")
    log_name = launcher_log_name(lau.node_rank, suffixed)
    log = os.fdopen(os.open(run_dir / log_name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600), "ab")
    # umask 077: every file and folder torchrun and the ranks create in the run directory is private (0600/0700)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                            start_new_session=True, umask=0o077)
    log.close()
    launch = Launch(preset, run_dir, argv, proc, status_name, locks, log_name=log_name)
    write_json_atomic(launch.status_path, launch.status())
    return launch


def _has_cuda() -> bool:
    from paradvisor.hardware.nvml import gpu_count

    return gpu_count() > 0


def run_blocking(launch: Launch, *, on_signal=True, watch=None, interval: float = 0.5) -> dict:
    """Wait for a launch; SIGINT/SIGTERM cancel it (every rank ends, status `cancelled`). `watch()`, when
    given, is called every `interval` seconds while the run goes (the wait then runs on a thread)."""
    old = {}
    if on_signal:
        def handler(signum, frame):
            launch.cancel(f"the launcher received {signal.Signals(signum).name}")

        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, handler)
    try:
        if watch is None:
            return launch.wait()
        out: dict = {}

        def waiter():
            try:
                out["doc"] = launch.wait()
            except BaseException as exc:  # handed to the caller's thread below
                out["error"] = exc

        t = threading.Thread(target=waiter, name="paradvisor-wait", daemon=True)
        t.start()
        while not launch.done.wait(interval):
            watch()
        t.join()
        if "error" in out:
            raise out["error"]
        return out["doc"]
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


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
    """status.json (read tolerantly: runfiles.read_status), but a run left `running` whose launcher and torchrun
    agent are gone (checked by pid and start time) reads as `interrupted`."""
    from paradvisor.runfiles import read_status

    doc = read_status(Path(run_dir) / "status.json")
    if doc.get("status") == "running":
        if "launcher_pid" in doc:
            alive = (_alive(doc["launcher_pid"], doc.get("launcher_started"))
                     or _alive(doc.get("pid"), doc.get("pid_started")))
        else:  # a status written before start times were recorded: the pid and its start after the run's
            started = doc.get("started")
            alive = _alive(doc.get("pid"), None) and not (started is not None and _created(doc["pid"]) > started + 5)
        if not alive:
            doc = {**doc, "status": "interrupted", "reason": "the launcher stopped without writing a final status"}
    return doc


def _created(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def main_exit_code(doc: dict) -> int:
    return 0 if doc.get("status") == "finished" else 1

