"""Slurm: the sbatch script (`--export slurm`), and `launch --submit slurm`, which submits it with sbatch,
records the job id in the run directory, follows the job to its end and cancels it with scancel on Ctrl-C,
SIGTERM or the TUI's stop.

The script starts one paradvisor node launcher per node with srun (`python -m paradvisor.launch.slurm
--run-dir DIR --endpoint HEAD:PORT`): each runs torchrun for its node (its own process count from the
plan, --node-rank = $SLURM_NODEID, the c10d rendezvous on the allocation's first node), with the local
runner's watchdogs (status-nodeN.json, launcher-nodeN.log, hang detection, samples.jsonl). The run
directory is on the filesystem the nodes share (as Slurm's own output files are); status.json is this
submitter's: one status for the whole job.

The script and the sbatch line are launch/slurm_script.py's (a dry run shows them, launch/engines.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from paradvisor import interrupts
from paradvisor.capture import run_capture
from paradvisor.errors import InputError
from paradvisor.launch import runner
from paradvisor.launch.datacopy import readable_here
from paradvisor.launch.diagnose import is_peer_error
from paradvisor.launch.requeue import follow_latest, requeued
from paradvisor.launch.slurm_script import checked, sbatch_argv, script
from paradvisor.monitor.follow import failure_text
from paradvisor.output import shell_join
from paradvisor.rundir import RunDir
from paradvisor.rundir import tail_lines as _tail
from paradvisor.rundir.lock import prepare_run_dir
from paradvisor.rundir.status import read_status, write_aborted, write_json_atomic
from paradvisor.safeio import write_private
from paradvisor.spec.preset import Preset, load_preset, write_run_plan

TERMINAL_STATES = tuple(
    "COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL PREEMPTED OUT_OF_MEMORY BOOT_FAIL DEADLINE".split()
)
# Pending reasons that never clear by waiting: the job asks for more than its partition, account or QOS allows
# per job, or for something that does not exist (Slurm's "JOB REASON CODES"). The launcher cancels such a job
# at once and says why; other reasons (Resources, Priority, PartitionDown, held) wait, up to
# launch.queue_timeout_s when one is set.
NEVER_STARTS = {
    "BadConstraints": "its constraints match no node",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is above the partition's",
    "InvalidAccount": "its account is not valid",
    "InvalidQOS": "its QOS is not valid",
    "DependencyNeverSatisfied": "a job it depends on can no longer satisfy the dependency",
    "AccountNotAllowed": "its account may not use the partition",
    "QOSNotAllowed": "its QOS may not use the partition",
}
POLL_S = 1.0
CANCEL_WAIT_S = 90.0  # scancel: Slurm sends SIGTERM, then SIGKILL after KillWait (30 s by default)
SLURM_TIMEOUT_S = 60.0  # one sbatch / scontrol / scancel call
SLURM_REPLY_BYTES = 1 << 20  # what one of them may print (a job id, one `scontrol show job -o` line)
DATA_RULE = "a Slurm job's nodes read the data path themselves: every node of the allocation must read it"
JOB_ID = re.compile(r"[0-9]{1,12}")  # a job id as sbatch --parsable prints it (before any ";cluster")


# ------------------------------------------------------------------------------------------------ in the job
def node_main(argv: list[str] | None = None) -> int:
    """One node of a Slurm job (started by srun): this node's torchrun, watched by the local runner."""
    ap = argparse.ArgumentParser(prog="python -m paradvisor.launch.slurm")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--endpoint", required=True)
    args = ap.parse_args(argv)
    try:
        node, nnodes = int(os.environ["SLURM_NODEID"]), int(os.environ.get("SLURM_NNODES", "1"))
        job = os.environ.get("SLURM_JOB_ID", "0")
    except (KeyError, ValueError):
        sys.stderr.write(
            "paradvisor.launch.slurm: run it inside a Slurm job step (srun): SLURM_NODEID is not set\n"
        )
        return 2
    run_dir, preset = Path(args.run_dir), None
    try:
        preset = load_preset(RunDir(run_dir).plan)
        if nnodes != preset.launch.nnodes:
            raise InputError(f"the job has {nnodes} node(s), the plan {preset.launch.nnodes}")
        lau = replace(preset.launch, engine="local", node_rank=node, rdzv_endpoint=args.endpoint)
        preset, run_dir, lineage = requeued(preset, run_dir)  # a requeue: a new folder (launch/requeue.py)
        readable_here(preset, f"node {node} ({socket.gethostname()})", DATA_RULE)
        launch = runner.start(
            replace(preset, launch=lau),
            runs_dir=run_dir.parent,
            run_dir=run_dir,
            run_id=f"slurm-{job}",
            reach=False,
            suffixed=True,
            is_host=(node == 0) if nnodes > 1 else None,
        )
    except InputError as exc:
        sys.stderr.write(f"paradvisor: {exc}\n")
        if preset is not None:  # the submitter reports it as this node's failure
            write_aborted(RunDir(run_dir).node_status(node), preset, exc)
        return 2
    if lineage:
        launch.lineage = lineage
        write_json_atomic(launch.status_path, launch.status())
    # srun's SIGTERM (scancel, requeue, pre-emption) stops gracefully: every rank saves a checkpoint and ends
    doc = runner.run_blocking(launch)
    return 0 if doc.get("status") == "finished" else 1


# ---------------------------------------------------------------------------------------------- submitting
def _run(argv: list[str]) -> subprocess.CompletedProcess:
    """A Slurm command, its output bounded (capture.run_capture: SLURM_REPLY_BYTES, SLURM_TIMEOUT_S)."""
    code, out, err, stopped = run_capture(argv, limit=SLURM_REPLY_BYTES, timeout=SLURM_TIMEOUT_S)
    if stopped:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} was stopped: it {stopped}")
    if code == 127 and not out:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
    return subprocess.CompletedProcess(argv, code, out, err)


def never_starts(reason: str) -> str | None:
    """Why a pending job with this Slurm reason cannot start as submitted, or None when waiting may help.
    Per-job limits of an association or QOS (`AssocMaxNodesPerJobLimit`, `QOSMaxWallDurationPerJobLimit`,
    ...) are permanent too; their per-user and total counterparts clear as other jobs end."""
    reason = (reason or "").strip()
    if reason in NEVER_STARTS:
        return NEVER_STARTS[reason]
    if reason.startswith(("Assoc", "QOS")) and "PerJob" in reason:
        return "it is above a per-job limit of its association or QOS"
    return None


def job_state(job_id: str) -> tuple[str | None, str]:
    """(JobState, Reason) from `scontrol show job -o`; (None, why) when Slurm no longer knows the job."""
    proc = _run(["scontrol", "show", "job", "-o", job_id])
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or [f"scontrol exit code {proc.returncode}"])[-1]
    fields = dict(re.findall(r"(\w+)=(\S*)", proc.stdout))
    return fields.get("JobState"), fields.get("Reason", "")


class SlurmJob:
    """A submitted job followed from here (a launch/handle.py RunHandle)."""

    def __init__(self, preset: Preset, run_dir: Path, job_id: str, argv: list[str], locks: list):
        import psutil

        self.preset, self.run_dir, self.job_id, self.argv, self.locks = preset, run_dir, job_id, argv, locks
        self.job_dir = run_dir  # the first attempt's; a requeued one runs in its own (launch/requeue.py)
        self.status_path = RunDir(run_dir).status
        self.cancel_requested, self.cancel_reason = False, "stopped by the user"
        self.gave_up: str | None = None  # why the launcher cancelled a job that cannot start (in time)
        self.started = time.time()
        self.done = threading.Event()
        self.state: str | None = "PENDING"
        me = psutil.Process()
        self.identity = {
            "launcher_pid": os.getpid(),
            "launcher_started": me.create_time(),
            "pid": os.getpid(),
            "pid_started": me.create_time(),
        }
        self.hang_detection = (
            f"Slurm job {job_id}: followed with scontrol; each node's hang detection as for a "
            "local run; Ctrl-C cancels the job (scancel)"
        )

    def cancel(self, reason: str = "stopped by the user", *, graceful: bool = False) -> None:
        """scancel the job: Slurm's SIGTERM already stops every rank with a checkpoint (graceful or not)."""
        if not self.cancel_requested:
            self.cancel_reason = reason
        self.cancel_requested = True

    def running(self) -> bool:
        return not self.done.is_set()

    def give_up(self, reason: str) -> None:
        """Cancel a job that will not start (in time): a failed run, not a stop the user asked for."""
        if not self.cancel_requested:
            self.gave_up = reason
            self.cancel(reason)

    def status(self, **kw) -> dict:
        doc = {
            "schema": "paradvisor.status/1",
            "status": "running",
            "engine": "slurm",
            "job_id": self.job_id,
            "slurm_state": self.state,
            "run_dir": str(self.run_dir),
            "name": self.preset.name,
            "started": self.started,
            "world_size": self.preset.plan.world_size,
            "node_rank": 0,
            "label": self.preset.plan.label(),
            "command": self.argv,
            **self.identity,
            "hang_timeout_s": None,
            "hang_detection": self.hang_detection,
            **getattr(self, "lineage", {}),
        }
        doc.update(kw)
        return doc

    def wait(self, poll: float = POLL_S) -> dict:
        try:
            doc = self._wait(poll)
            write_json_atomic(self.status_path, doc)
            return doc
        except BaseException as exc:  # a failure while following: cancel the job, the status says why
            _run(["scancel", self.job_id])
            _write_final(self.status_path, self.preset, exc, f"job {self.job_id} cancelled (scancel)")
            raise
        finally:
            for lock in self.locks:
                lock.close()
            self.done.set()

    def _node_statuses(self) -> dict[int, dict]:
        follow_latest(self)  # a requeued job's nodes report in its newest attempt's folder
        out = {}
        for i in range(self.preset.launch.nnodes):
            p = RunDir(self.run_dir).node_status(i)
            if p.exists():
                out[i] = read_status(p).to_doc()
        return out

    def _wait(self, poll: float) -> dict:
        cancelled_at = None
        gone = 0
        reason = None
        queued_since = time.monotonic()
        limit = self.preset.launch.queue_timeout_s
        while True:
            state, why = job_state(self.job_id)
            if state is None:
                gone += 1  # Slurm forgets a job MinJobAge (300 s) after its end; a hiccup is retried
            else:
                gone = 0
                if state != self.state or why != reason:
                    self.state, reason = state, why
                    write_json_atomic(self.status_path, self.status(slurm_reason=why))
            base = state.split()[0] if state else None
            if base == "PENDING" and not self.cancel_requested:
                why_not = never_starts(why)
                waited = time.monotonic() - queued_since
                if why_not:
                    self.give_up(f"Slurm job {self.job_id} cannot start as submitted ({why}: {why_not})")
                elif limit and waited > limit:
                    self.give_up(
                        f"Slurm job {self.job_id} still pending after {waited:.0f} s "
                        f"(launch.queue_timeout_s = {limit:g}; Slurm's reason: {why or 'none given'})"
                    )
            if self.cancel_requested and cancelled_at is None:
                cancelled_at = time.monotonic()
                _run(["scancel", self.job_id])
            if (
                base in TERMINAL_STATES
                or gone >= 5
                or (cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_WAIT_S)
            ):
                break
            time.sleep(poll)
        time.sleep(0.5)  # the node launchers' last status writes
        nodes = self._node_statuses()
        ended = time.time()
        common = {
            "ended": ended,
            "duration_s": ended - self.started,
            "slurm_state": self.state,
            "nodes": [
                {"node": i, "state": d.get("status"), "reason": d.get("reason")}
                for i, d in sorted(nodes.items())
            ],
        }
        out_tail = _tail(self.job_dir / f"slurm-{self.job_id}.out")
        if self.gave_up and not nodes:  # it never started: nothing ran, nothing to diagnose
            return self.status(
                status="failed",
                failed_rank=None,
                exit_code=None,
                reason=f"{self.gave_up}; cancelled (scancel)",
                last_log_lines=out_tail,
                returncode=1,
                **common,
            )
        if self.cancel_requested:
            return self.status(
                status="cancelled",
                reason=f"{self.cancel_reason}; Slurm job {self.job_id} cancelled (scancel)",
                returncode=1,
                **common,
            )
        failed = sorted((i, d) for i, d in nodes.items() if d.get("status") != "finished")
        if self.state == "COMPLETED" and len(nodes) == self.preset.launch.nnodes and not failed:
            return self.status(status="finished", returncode=0, **common)
        if failed:
            i, d = min(failed, key=lambda x: (is_peer_error(x[1].get("reason")), x[1].get("ended") or 0))
            return self.status(
                status="failed",
                failed_node=i,
                failed_rank=d.get("failed_rank"),
                exit_code=d.get("exit_code"),
                hung=bool(d.get("hung")),
                reason=f"{d.get('reason') or 'failed'} — on node {i} of Slurm job {self.job_id} "
                f"({self.state})",
                last_log_lines=d.get("last_log_lines") or out_tail,
                returncode=1,
                **common,
            )
        missing = [i for i in range(self.preset.launch.nnodes) if i not in nodes]
        return self.status(
            status="failed",
            failed_rank=None,
            exit_code=None,
            failed_node=missing[0] if missing else None,
            reason=f"Slurm job {self.job_id} ended {self.state or 'unknown to Slurm'} before "
            f"node(s) {', '.join(map(str, missing))} reported; see slurm-{self.job_id}.out",
            last_log_lines=out_tail,
            returncode=1,
            **common,
        )


def _write_final(path: Path, preset: Preset, exc: BaseException, what: str) -> None:
    """The status of a submitted job whose follower failed or was interrupted: failed/interrupted, with why."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    old = read_status(path).to_doc() if path.exists() else {}
    doc = {
        **{k: v for k, v in old.items() if k != "unreadable_fields"},
        "schema": "paradvisor.status/1",
        "status": "interrupted" if interrupted else "failed",
        "reason": (
            "interrupted (Ctrl-C)" if interrupted else f"the launcher failed: {type(exc).__name__}: {exc}"
        )[:400]
        + f"; {what}",
        "name": preset.name,
        "ended": time.time(),
    }
    with contextlib.suppress(OSError):
        write_json_atomic(path, doc)


def submit(preset: Preset, *, runs_dir: Path, run_dir: Path | None = None, hold: bool = False) -> SlurmJob:
    """Write the run directory and the script, sbatch it, record the job id: the job to follow. `hold` as
    runner.start's: SIGINT/SIGTERM since the job exists are still held on return, for run_blocking."""
    preset = checked(preset)
    run_dir, locks, held = prepare_run_dir(
        Path(run_dir).absolute() if run_dir else None,
        Path(runs_dir).absolute(),
        preset,
        lock_name=".lock-submit",
    )
    try:
        interrupts.release(held)  # a Ctrl-C since the folder's making: its status written below
        write_run_plan(RunDir(run_dir).plan, preset)
        text = script(preset, run_dir=str(run_dir), python=sys.executable)
        write_private(run_dir / "job.sbatch", text)
        argv = sbatch_argv(str(run_dir))
        write_json_atomic(
            RunDir(run_dir).node_file("command", 0), {"engine": "slurm", "argv": argv, "cwd": os.getcwd()}
        )
        proc = _run(argv)
        job_id = proc.stdout.strip().split(";")[0].strip() if proc.returncode == 0 else ""
        if not JOB_ID.fullmatch(job_id):
            why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1][:300]
            if proc.returncode == 0:
                why = f"it printed no job id ({job_id[:40]!r}{'...' if len(job_id) > 40 else ''})"
            doc = {
                "schema": "paradvisor.status/1",
                "status": "failed",
                "engine": "slurm",
                "run_dir": str(run_dir),
                "name": preset.name,
                "label": preset.plan.label(),
                "started": time.time(),
                "ended": time.time(),
                "failed_rank": None,
                "exit_code": proc.returncode,
                "reason": f"sbatch refused the job: {why}",
                "last_log_lines": proc.stderr.splitlines()[-20:],
            }
            write_json_atomic(RunDir(run_dir).status, doc)
            raise SubmitFailed(doc)
        try:
            write_json_atomic(
                run_dir / "slurm.json",
                {"job_id": job_id, "script": "job.sbatch", "sbatch": argv, "submitted": time.time()},
            )
            job = SlurmJob(preset, run_dir, job_id, argv, locks)
            write_json_atomic(job.status_path, job.status())
            interrupts.hold_signals()  # the job exists: a Ctrl-C is run_blocking's to answer (runner.start)
        except (
            BaseException
        ) as exc:  # the job is in the queue: never leave it there without a run to follow it
            interrupts.unhold()
            _run(["scancel", job_id])
            _write_final(RunDir(run_dir).status, preset, exc, f"job {job_id} cancelled (scancel)")
            raise
        if not hold:
            job.held_signals = interrupts.unhold()
        return job
    except BaseException as exc:
        write_aborted(RunDir(run_dir).status, preset, exc)
        for lock in locks:
            lock.close()
        raise


class SubmitFailed(Exception):
    def __init__(self, doc: dict):
        super().__init__(doc["reason"])
        self.doc = doc


def submit_and_follow(preset: Preset, *, runs_dir: Path, run_dir: Path | None = None) -> int:
    """`launch --submit slurm`: submit, follow to the end (Ctrl-C / SIGTERM cancel the job), exit 0 / 1."""
    try:
        job = submit(preset, runs_dir=runs_dir, run_dir=run_dir, hold=True)
    except SubmitFailed as exc:
        sys.stderr.write(f"failed: {exc.doc['run_dir']} — {exc.doc['reason']}\n")
        print(exc.doc["run_dir"])
        return 1
    try:  # a Ctrl-C since the job exists waits for run_blocking: it cancels the job
        sys.stderr.write(
            f"run directory: {job.run_dir}\nSlurm job {job.job_id} submitted: {shell_join(job.argv)}\n"
        )
        doc = runner.run_blocking(job)
    finally:
        interrupts.unhold()  # nothing once run_blocking has taken the held signals
    line = f"{doc['status']}: {job.run_dir} (Slurm job {job.job_id}, {doc.get('slurm_state')})"
    if failure_text(doc):
        line += f" — {failure_text(doc)}"
    sys.stderr.write(line + "\n")
    print(job.run_dir)
    return runner.main_exit_code(doc)


if __name__ == "__main__":
    sys.exit(node_main())
