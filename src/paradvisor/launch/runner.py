"""Run a Preset for real on this machine's node: validate (launch/preflight.py), create the run directory,
start torchrun in its own process group, watch it, and record what happened in status.json.

The run directory's files are listed in paradvisor/rundir/__init__.py (the run contract); a failed or hung
run is diagnosed by launch/diagnose.py; a launch over ssh is launch/sshrun.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from paradvisor import interrupts
from paradvisor.errors import InputError
from paradvisor.launch.argv import check_port_free, free_port, split_endpoint, torchrun_argv
from paradvisor.launch.diagnose import diagnose, dump_stacks, hang_report
from paradvisor.launch.handle import RunHandle
from paradvisor.launch.hang import HangClock, hang_timeout, predicted_step
from paradvisor.launch.preflight import has_cuda, validate
from paradvisor.rundir import LAUNCHER_LOG, RunDir, launcher_log_name, new_run_dir, node_file, rank_process
from paradvisor.rundir import read_tail
from paradvisor.rundir.lock import lock_file, prepare_run_dir
from paradvisor.rundir.status import RunState, main_exit_code, write_aborted, write_final, write_json_atomic
from paradvisor.safeio import open_private, private_dir, write_private
from paradvisor.spec.faults import LAUNCHER_PID_ENV, LAUNCHER_START_ENV
from paradvisor.spec.preset import LOCAL_HOSTS, Preset, engine_of, write_run_plan

__all__ = [
    "Launch",
    "endpoint_for",
    "main_exit_code",
    "new_run_dir",
    "prepare_run_dir",
    "run_blocking",
    "start",
    "validate",
]


LISTEN_HERE = (*LOCAL_HOSTS, "0.0.0.0")  # a rendezvous host that node 0 listens on on this machine


def endpoint_for(preset: Preset) -> tuple[str, Preset]:
    lau = preset.launch
    if lau.rdzv_endpoint:
        host, port = split_endpoint(lau.rdzv_endpoint)
        if lau.node_rank == 0 and host in LISTEN_HERE:
            check_port_free(host, port)
        return lau.rdzv_endpoint, preset
    port = lau.master_port or free_port()
    if lau.master_port:
        check_port_free("127.0.0.1", port)
    return f"127.0.0.1:{port}", replace(preset, launch=replace(lau, master_port=port))


# the run's name on every node (its checkpoints' folder in checkpoint_dir)
RUN_NAME_ENV = "PARADVISOR_RUN_NAME"


def _ranks_all_ended(run_dir: Path, world: int) -> bool:
    """Whether every rank wrote its `end` record after its last step (training is over: what is left is
    torchrun's own exit). A rank that saved and ended on a stop signal wrote `stopped` first: its run did
    not finish. The end records are the metrics' last lines: the file's tail is enough."""
    ended = set()
    for line in read_tail(RunDir(run_dir).metrics, 256 << 10).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("kind") == "stopped":
            return False
        if rec.get("kind") == "end" and isinstance(rec.get("rank"), int):
            ended.add(rec["rank"])
    return len(ended) >= world


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
        proc = rank_process(run_dir, r)
        if proc is not None:
            try:
                proc.kill()
            except psutil.Error:
                continue


class Launch:
    """A started run: `wait()` blocks until it ends and returns the final status document."""

    def __init__(
        self,
        preset: Preset,
        run_dir: Path,
        argv: list[str],
        proc: subprocess.Popen,
        status_name: str,
        locks: list | None = None,
        log_name: str = LAUNCHER_LOG,
    ):
        self.preset, self.run_dir, self.argv, self.proc = preset, run_dir, argv, proc
        self.log_name = log_name
        self.status_path = run_dir / status_name
        self.cancel_requested = False
        self.cancel_reason = "stopped by the user"
        self.stopping: str | None = (
            None  # a graceful stop asked for (its reason): the ranks checkpoint, then end
        )
        self.lineage: dict = {}  # parent run, checkpoint resumed from (launch/resume.py)
        self._told: set[int] = set()  # the ranks a graceful stop was sent to
        self.started = time.time()
        self.done = threading.Event()  # set once the final status is written
        self.locks = locks or []  # the run directory's (and a fixed port's) lock, held until the run ends
        self.hang_timeout_s, self.hang_detection = hang_timeout(preset, predicted_step(run_dir))
        import psutil

        # The identity of the processes that keep the run going: a pid alone may be reused once they are gone.
        self.identity = {"launcher_pid": os.getpid(), "launcher_started": psutil.Process().create_time()}
        try:
            self.identity.update(pid_started=psutil.Process(proc.pid).create_time())
        except psutil.Error:
            pass

    def cancel(self, reason: str = "stopped by the user", *, graceful: bool = False) -> None:
        """Stop the run: at once, or (`graceful`) with a checkpoint at the next step boundary — every rank
        gets SIGTERM (train/checkpoint.py saves, then the rank ends); a second cancel stops at once."""
        if graceful and self.stopping is None and not self.cancel_requested:
            self.stopping = reason
            self._stop_ranks()
            return
        if not self.cancel_requested:
            self.cancel_reason = reason
        self.cancel_requested = True

    def running(self) -> bool:
        return not self.done.is_set() and self.proc.poll() is None

    def _stop_ranks(self) -> None:
        """SIGTERM to each of this node's ranks not told yet (train/checkpoint.py saves, then the rank ends).
        A stop asked for before a rank exists reaches it once it does (wait() calls this on every poll)."""
        for r in range(self.preset.launch.procs(self.preset.launch.node_rank)):
            rank = r + self._first_rank()
            if rank in self._told:
                continue
            proc = rank_process(self.run_dir, rank)
            if proc is not None:
                self._told.add(rank)
                with contextlib.suppress(Exception):  # gone already
                    proc.terminate()

    def _first_rank(self) -> int:
        lau = self.preset.launch
        return sum(lau.procs(n) for n in range(lau.node_rank))

    def status(self, **kw) -> dict:
        doc = {
            "schema": "paradvisor.status/1",
            "status": RunState.RUNNING,
            "run_dir": str(self.run_dir),
            "name": self.preset.name,
            "pid": self.proc.pid,
            "started": self.started,
            "world_size": self.preset.plan.world_size,
            "node_rank": self.preset.launch.node_rank,
            "label": self.preset.plan.label(),
            "command": self.argv,
            **self.identity,
            "hang_timeout_s": self.hang_timeout_s or None,
            "hang_detection": self.hang_detection,
            **self.lineage,
        }
        doc.update(kw)
        return doc

    def wait(self, poll: float = 0.2) -> dict:
        from paradvisor.monitor.runcache import keep  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        try:
            doc = self._wait(poll)
            keep(self.run_dir)  # the ended run's `runs` entry, kept beside its files (summary.json)
            return doc
        finally:
            for lock in self.locks:
                lock.close()
            self.done.set()

    def _wait(self, poll: float) -> dict:
        from paradvisor.monitor.sampler import SampleLog  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        clock = HangClock(
            self.hang_timeout_s, self.preset.train.hang_timeout_s is None, RunDir(self.run_dir).metrics
        )
        hung = None
        samples = SampleLog(self.run_dir, self.preset.launch.node_rank)
        samples.tick()  # one reading even for a run that ended while the prediction was written
        stopped = False  # whether the cancel stopped the run here (a cancel after its end stops nothing)
        while self.proc.poll() is None:
            samples.tick()
            if self.stopping is not None:
                self._stop_ranks()
            if self.cancel_requested:
                stopped = True
                _kill_group(self.proc)
                break
            if clock.hung():
                hung = dump_stacks(self.run_dir, self.preset.plan.world_size)
                _kill_group(self.proc)
                break
            time.sleep(poll)
        rc = self.proc.wait()
        samples.close()
        _reap_ranks(self.run_dir, self.preset.plan.world_size)
        ended = time.time()
        common = {"ended": ended, "duration_s": ended - self.started, "returncode": rc}
        world = self.preset.plan.world_size
        if self.cancel_requested and (rc == 0 or _ranks_all_ended(self.run_dir, world)):
            # The stop came after every rank had finished (the ranks were done, torchrun was closing):
            # the run finished; the stop ended nothing.
            doc = self.status(status=RunState.FINISHED, **common)
            if rc != 0:
                doc["note"] = f"stopped while torchrun was closing after every rank had finished (exit {rc})"
        elif self.cancel_requested and stopped:
            doc = self.status(status=RunState.CANCELLED, reason=self.cancel_reason, **common)
        elif self.stopping is not None:
            from paradvisor.launch.resume import stopped_reason  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

            doc = self.status(
                status=RunState.CANCELLED, reason=stopped_reason(self), stopped_gracefully=True, **common
            )
        elif hung is not None:
            report = hang_report(
                self.run_dir, hung, clock.timeout, rc, self.preset.plan.world_size, self.log_name
            )
            doc = self.status(status=RunState.FAILED, **report, **common)
        elif rc == 0:
            doc = self.status(status=RunState.FINISHED, **common)
            if self.preset.program.own and not _has_step_records(self.run_dir):
                doc["note"] = doc["reason"] = NO_STEPS
        else:
            doc = self.status(
                status=RunState.FAILED,
                **diagnose(
                    self.run_dir, self.preset.plan.world_size, rc, self.proc.pid, log_name=self.log_name
                ),
                **common,
            )
            from paradvisor.launch.replan import is_oom, write_replan  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

            if is_oom(doc.get("reason", "")) or any(is_oom(x) for x in doc.get("last_log_lines", [])):
                doc["oom"] = True
                try:
                    doc["replan"] = write_replan(self.run_dir, self.preset)
                except Exception as exc:  # a re-plan is advice: never let it hide the failure itself
                    doc["replan_error"] = f"{type(exc).__name__}: {exc}"
        return write_final(self.status_path, doc, self.preset.launch.checkpoint_dir)


NO_STEPS = (
    "no step records: the script never called paradvisor.runtime.report() (nor ran ParadvisorCallback), "
    "so there is no loss, step time or ETA to show"
)


def _has_step_records(run_dir: Path) -> bool:
    from paradvisor.rundir.metrics import MetricsReader  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

    reader = MetricsReader(RunDir(run_dir).metrics)
    reader.read(keep=0)
    return bool(reader.tally.slowest)


def _port_lock(endpoint: str, preset: Preset):
    """A fixed port on this machine is held by one paradvisor launch at a time (two launches given the same
    master_port would otherwise join one rendezvous). None for a free port picked here."""
    host, port = split_endpoint(endpoint)
    if host not in LISTEN_HERE or preset.launch.node_rank != 0:
        return None
    d = Path(tempfile.gettempdir()) / f"paradvisor-{os.getuid()}-ports"
    try:  # in a shared /tmp: another user may have made that folder first, or planted links in it
        private_dir(d, what="the port lock folder")
    except OSError as exc:
        raise InputError(f"cannot lock port {port}: {exc.strerror or exc}", where=str(d)) from None
    return lock_file(d / f"{port}.lock", f"port {port}")


def start(
    preset: Preset,
    *,
    runs_dir: Path,
    run_dir: Path | None = None,
    env: dict | None = None,
    ssh_config: str | None = None,
    ssh_timeout: float | None = None,
    run_id: str | None = None,
    reach: bool = True,
    is_host: bool | None = None,
    suffixed: bool = False,
    run_name: str | None = None,
    hold: bool = False,
) -> RunHandle:
    """Start a run: this machine's node (engine local), or every node over ssh (engine ssh: launch/sshrun.py);
    whichever engine, what comes back is a launch/handle.py RunHandle. `run_id` names the rendezvous (default: the run
    directory's name); `is_host` tells torchrun whether this node serves the rendezvous store; `suffixed` names
    even node 0's status, command and launcher log per node (node_file: a Slurm job's nodes); `run_name` is the
    whole run's name where this node's run directory is one of several (the ssh engine's nodes): a shared
    launch.checkpoint_dir keeps the run's checkpoints under it. `hold`: SIGINT/SIGTERM since the run exists are
    still held on return, for `run_blocking` to answer (interrupts.py): no Ctrl-C in between leaves the run."""
    if engine_of(preset.launch) == "ssh":
        from paradvisor.launch import sshrun  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

        return sshrun.start(
            preset,
            runs_dir=runs_dir,
            run_dir=run_dir,
            env=env,
            ssh_config=ssh_config,
            ssh_timeout=ssh_timeout,
            hold=hold,
        )
    validate(preset, reach=reach)
    endpoint, preset = endpoint_for(preset)
    run_dir, locks, held = _claim(run_dir, runs_dir, preset, endpoint, suffixed)
    status_path = run_dir / node_file("status", preset.launch.node_rank, suffixed)
    # never a folder without a status: a failure or a Ctrl-C (one the claim held too) before it writes one
    try:
        interrupts.release(held)
        env = {**(env or {}), RUN_NAME_ENV: run_name or run_dir.name}
        return _start_claimed(
            preset, run_dir, locks, endpoint, run_id, is_host, suffixed, env, status_path, hold
        )
    except BaseException as exc:
        write_aborted(status_path, preset, exc)
        for lock in locks:
            lock.close()
        raise


def _start_claimed(preset, run_dir, locks, endpoint, run_id, is_host, suffixed, env, status_path, hold):
    lau = preset.launch
    argv = torchrun_argv(
        str(run_dir),
        nproc_per_node=lau.procs(lau.node_rank),
        nnodes=lau.nnodes,
        node_rank=lau.node_rank,
        endpoint=endpoint,
        run_id=run_id or run_dir.name,
        join_timeout_s=lau.join_timeout_s,
        is_host=is_host,
        program=preset.program,
    )
    _write_run_files(RunDir(run_dir), preset, argv, suffixed)
    log_name = launcher_log_name(lau.node_rank, suffixed)
    log = os.fdopen(open_private(run_dir / log_name, append=True), "ab")
    # umask 077: every file and folder torchrun and the ranks create in the run directory is private (0600/0700)
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=_torchrun_env(preset, RunDir(run_dir), env),
        start_new_session=True,
        umask=0o077,
    )
    log.close()
    try:
        launch = Launch(
            preset,
            run_dir,
            argv,
            proc,
            node_file("status", lau.node_rank, suffixed),
            locks,
            log_name=log_name,
        )
        write_json_atomic(launch.status_path, launch.status())
        interrupts.hold_signals()  # the run exists: SIGINT/SIGTERM wait for run_blocking (interrupts.py)
    except BaseException:  # torchrun runs in its own session: Ctrl-C here must not leave it behind
        interrupts.unhold()
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)
        raise
    with interrupts.held_for(launch, keep=hold):
        if lau.node_rank == 0 and not suffixed:  # every run carries a prediction (monitor/predict.py) ...
            from paradvisor.monitor.predict import launch_prediction  # noqa: PLC0415 - start-up: `paradvisor launch --dry-run` does not load it

            # ... counted while the ranks start (they never read it): no rank waits for the advice
            write_json_atomic(RunDir(run_dir).prediction, launch_prediction(preset).to_doc())
            # the hang timeout derives from the run's own predicted step time, now that there is one
            launch.hang_timeout_s, launch.hang_detection = hang_timeout(preset, predicted_step(run_dir))
    return launch


def _claim(
    run_dir: Path | None, runs_dir: Path, preset: Preset, endpoint: str, suffixed: bool
) -> tuple[Path, list, set]:
    """The run directory and its locks (and the fixed rendezvous port's, when the preset names one), and the
    Ctrl-C held since before the folder was made (rundir/lock.prepare_run_dir), for the caller to release."""
    fixed = preset.launch.master_port or preset.launch.rdzv_endpoint
    port_lock = _port_lock(endpoint, preset) if fixed else None
    try:
        run_dir, locks, held = prepare_run_dir(run_dir, runs_dir, preset, suffixed=suffixed)
    except BaseException:
        if port_lock:
            port_lock.close()
        raise
    if port_lock:
        locks.append(port_lock)
    return run_dir, locks, held


def _write_run_files(rd: RunDir, preset: Preset, argv: list[str], suffixed: bool) -> None:
    """plan.toml (node 0, or the first node to get there) and this node's command files (prediction.json: once
    the ranks are started, `start`)."""
    lau = preset.launch
    if (lau.node_rank == 0 and not suffixed) or not rd.plan.exists():
        write_run_plan(rd.plan, preset)
    write_json_atomic(rd.node_file("command", lau.node_rank, suffixed), {"argv": argv, "cwd": os.getcwd()})
    if not suffixed:
        write_private(rd.command_txt, shlex.join(argv) + "\n")  # pasted into a shell, it runs only this


def _torchrun_env(preset: Preset, rd: RunDir, env: dict | None) -> dict:
    """torchrun's environment: the launcher's identity (ranks stop when it dies), the error file, the device."""
    import psutil

    full_env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        LAUNCHER_PID_ENV: str(os.getpid()),
        LAUNCHER_START_ENV: repr(psutil.Process().create_time()),
        "TORCHELASTIC_ERROR_FILE": str(rd.torchelastic_error(preset.launch.node_rank)),
        # the user's own code finds its plan here (paradvisor.runtime): the run directory and its plan file
        "PARADVISOR_RUN_DIR": str(Path(rd).resolve()),
        "PARADVISOR_PLAN": str(rd.plan.resolve()),
        **(env or {}),
    }
    if preset.launch.memory_limit:  # the cap (RLIMIT_AS) counts address space: glibc's 64 MiB malloc arena
        full_env.setdefault(
            "MALLOC_ARENA_MAX", "2"
        )  # per thread (gloo, TensorBoard, DCP) would fill it unused
    # ACCELERATE_USE_CPU: the HF Trainer and Accelerate (a --script) run distributed on CPUs only when told
    # so; without it each rank would train alone, silently
    if preset.train.device == "cpu":
        full_env["CUDA_VISIBLE_DEVICES"] = ""
        full_env["DS_ACCELERATOR"] = "cpu"
        full_env["ACCELERATE_USE_CPU"] = "true"
    elif not has_cuda():
        full_env.setdefault("DS_ACCELERATOR", "cpu")
        full_env.setdefault("ACCELERATE_USE_CPU", "true")
    return full_env


def run_blocking(launch: Launch, *, on_signal=True, watch=None, interval: float = 0.5) -> dict:
    """Wait for a launch; SIGINT/SIGTERM cancel it (every rank ends, status `cancelled`). `watch()`, when
    given, is called every `interval` seconds while the run goes (the wait then runs on a thread)."""
    old = {}
    if on_signal:

        def handler(signum, frame):  # the first stops with a checkpoint, a second at once
            launch.cancel(
                f"the launcher received {signal.Signals(signum).name}",
                graceful=getattr(launch, "stopping", "") is None,
            )

        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, handler)
        unheld, held = interrupts.take_over()  # start(hold=True): restored to what was there before the hold
        old.update(unheld)
        # what arrived since the run exists, and a Ctrl-C whose KeyboardInterrupt was dropped
        for signum in [
            *getattr(launch, "held_signals", ()),
            *held,
            *([signal.SIGINT] if interrupts.take() else []),
        ]:
            handler(signum, None)
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
