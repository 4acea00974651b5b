"""Run a Preset for real: validate, create the run directory, start torchrun in its own process
group, watch it, and record what happened in status.json.

Run directory (`runs/<timestamp>-<name>/`, mode 0700):
  plan.toml            the preset as launched (CLI overrides applied)
  command.json/.txt    the exact argv
  launcher.log         torchrun's own output
  rank-N.stdout.log    each rank's stdout / stderr
  rank-N.stderr.log
  rank-N.exit.json     each rank's exit code and error (absent if it was killed)
  metrics.jsonl        one JSON object per logged step per rank
  status.json          running | finished | failed | cancelled | interrupted, with the reason
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from paradvisor.errors import InputError
from paradvisor.launch.argv import check_port_free, free_port, split_endpoint, torchrun_argv
from paradvisor.launch.preset import Preset, write_toml_atomic

TERMINAL = ("finished", "failed", "cancelled", "interrupted")


def write_json_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, path)


def validate(preset: Preset, *, reach: bool = True) -> None:
    """Everything that can be checked before a process starts (exit 2 on failure). `reach=False` (dry runs,
    exports) skips the ssh reachability check of the hosts; their names are still checked."""
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
    check_plan_shape(preset, family, prof)
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


def check_plan_shape(preset: Preset, family: str, prof) -> None:
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
    if plan.sequence_parallel and s is not None and preset.workload.seq_len % plan.tp:
        raise InputError(f"sequence parallelism splits the sequence over TP {plan.tp}: seq_len {preset.workload.seq_len} "
                         f"is not a multiple of it", where=f"{where}: workload.seq_len")
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


def _tail(path: Path, n: int = 20) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


PEER_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe", "connection refused",
               "remote worker", "communicator was aborted", "socket timeout", "recvbytes", "sendbytes",
               "the paradvisor launcher")


def is_peer_error(error: str | None) -> bool:
    """An error a rank gets because another rank (or the launcher) went away first."""
    e = (error or "").lower()
    return any(p in e for p in PEER_ERRORS)


def diagnose(run_dir: Path, world: int, returncode: int) -> dict:
    """Which rank failed, with what exit code or signal, and its last log lines."""
    codes = {}
    for r in range(world):
        f = run_dir / f"rank-{r}.exit.json"
        if f.exists():
            try:
                codes[r] = json.loads(f.read_text())
            except json.JSONDecodeError:
                pass
    log = (run_dir / "launcher.log").read_text(errors="replace") if (run_dir / "launcher.log").exists() else ""
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
        missing = [r for r in range(world) if r not in codes]
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
    lines = _tail(run_dir / f"rank-{failed_rank}.stderr.log") if failed_rank is not None else _tail(run_dir / "launcher.log")
    if not reason:
        reason = next((ln for ln in reversed(lines) if ln.strip()), f"exit code {returncode}")
    return {"failed_rank": failed_rank, "exit_code": exit_code, "reason": reason, "last_log_lines": lines,
            "rank_exit_codes": {str(r): d.get("exit_code") for r, d in sorted(codes.items())}}


HANG_DUMP_WAIT_S = 3.0


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


def hang_report(run_dir: Path, stacks: dict[int, list[str] | None], hang: float, rc: int, world: int) -> dict:
    d = diagnose(run_dir, world, rc)
    suspects = hang_suspects(stacks)
    from paradvisor.monitor.follow import MetricsFollower

    follower = MetricsFollower(run_dir)
    follower.poll()
    last = {rec["rank"]: rec["step"] for rec in follower.records if rec.get("kind") == "step"}
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

    def __init__(self, preset: Preset, run_dir: Path, argv: list[str], proc: subprocess.Popen, status_name: str):
        self.preset, self.run_dir, self.argv, self.proc = preset, run_dir, argv, proc
        self.status_path = run_dir / status_name
        self.cancel_requested = False
        self.cancel_reason = "stopped by the user"
        self.started = time.time()
        self.done = threading.Event()  # set once the final status is written

    def cancel(self, reason: str = "stopped by the user") -> None:
        if not self.cancel_requested:
            self.cancel_reason = reason
        self.cancel_requested = True

    def status(self, **kw) -> dict:
        doc = {"schema": "paradvisor.status/1", "status": "running", "run_dir": str(self.run_dir),
               "name": self.preset.name, "pid": self.proc.pid, "started": self.started,
               "world_size": self.preset.plan.world_size, "node_rank": self.preset.launch.node_rank,
               "label": self.preset.plan.label(), "command": self.argv}
        doc.update(kw)
        return doc

    def wait(self, poll: float = 0.2) -> dict:
        try:
            return self._wait(poll)
        finally:
            self.done.set()

    def _wait(self, poll: float) -> dict:
        hang = self.preset.train.hang_timeout_s
        metrics = self.run_dir / "metrics.jsonl"
        # The hang clock starts with the first metrics record: start-up (rendezvous, imports, model build)
        # is bounded by the process group's own timeout instead, so a slow start is not called a hang.
        last_progress = time.monotonic()
        last_size = 0
        hung = None
        while self.proc.poll() is None:
            if self.cancel_requested:
                _kill_group(self.proc)
                break
            if hang:
                size = metrics.stat().st_size if metrics.exists() else 0
                if size != last_size:
                    last_size, last_progress = size, time.monotonic()
                elif size and time.monotonic() - last_progress > hang:
                    hung = dump_stacks(self.run_dir, self.preset.plan.world_size)
                    _kill_group(self.proc)
                    break
            time.sleep(poll)
        rc = self.proc.wait()
        _reap_ranks(self.run_dir, self.preset.plan.world_size)
        ended = time.time()
        common = {"ended": ended, "duration_s": ended - self.started, "returncode": rc}
        if self.cancel_requested:
            doc = self.status(status="cancelled", reason=self.cancel_reason, **common)
        elif hung is not None:
            report = hang_report(self.run_dir, hung, hang, rc, self.preset.plan.world_size)
            doc = self.status(status="failed", **report, **common)
        elif rc == 0:
            doc = self.status(status="finished", **common)
        else:
            doc = self.status(status="failed", **diagnose(self.run_dir, self.preset.plan.world_size, rc), **common)
            from paradvisor.launch.replan import is_oom, write_replan

            if is_oom(doc.get("reason", "")) or any(is_oom(x) for x in doc.get("last_log_lines", [])):
                doc["oom"] = True
                try:
                    doc["replan"] = write_replan(self.run_dir, self.preset)
                except Exception as exc:  # a re-plan is advice: never let it hide the failure itself
                    doc["replan_error"] = f"{type(exc).__name__}: {exc}"
        write_json_atomic(self.status_path, doc)
        return doc


def start(preset: Preset, *, runs_dir: Path, run_dir: Path | None = None, env: dict | None = None) -> Launch:
    validate(preset)
    endpoint, preset = endpoint_for(preset)
    if run_dir is None:
        run_dir = new_run_dir(Path(runs_dir), preset.name)
    else:
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    lau = preset.launch
    argv = torchrun_argv(str(run_dir), nproc_per_node=lau.procs(lau.node_rank), nnodes=lau.nnodes,
                         node_rank=lau.node_rank, endpoint=endpoint, run_id=run_dir.name)
    status_name = "status.json" if lau.node_rank == 0 else f"status-node{lau.node_rank}.json"
    if lau.node_rank == 0 or not (run_dir / "plan.toml").exists():
        write_toml_atomic(run_dir / "plan.toml", preset.to_doc(), force=True,
                          header=f"# paradvisor run plan: {preset.plan.label()}\n")
    write_json_atomic(run_dir / ("command.json" if lau.node_rank == 0 else f"command-node{lau.node_rank}.json"),
                      {"argv": argv, "cwd": os.getcwd()})
    (run_dir / "command.txt").write_text(" ".join(argv) + "\n")
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
    log = open(run_dir / ("launcher.log" if lau.node_rank == 0 else f"launcher-node{lau.node_rank}.log"), "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env,
                            start_new_session=True)
    log.close()
    launch = Launch(preset, run_dir, argv, proc, status_name)
    write_json_atomic(launch.status_path, launch.status())
    return launch


def _has_cuda() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def run_blocking(launch: Launch, *, on_signal=True) -> dict:
    """Wait for a launch; SIGINT/SIGTERM cancel it (every rank ends, status `cancelled`)."""
    old = {}
    if on_signal:
        def handler(signum, frame):
            launch.cancel(f"the launcher received {signal.Signals(signum).name}")

        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, handler)
    try:
        return launch.wait()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def effective_status(run_dir: Path) -> dict:
    """status.json, but a run left `running` whose processes are gone reads as `interrupted`."""
    p = run_dir / "status.json"
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return {"status": "unknown", "run_dir": str(run_dir), "reason": "no readable status.json"}
    if doc.get("status") == "running":
        import psutil

        pid = doc.get("pid")
        alive = False
        if pid:
            try:
                alive = psutil.Process(pid).is_running() and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                alive = False
        if not alive:
            doc = {**doc, "status": "interrupted", "reason": "the launcher stopped without writing a final status"}
    return doc


def main_exit_code(doc: dict) -> int:
    return 0 if doc.get("status") == "finished" else 1

