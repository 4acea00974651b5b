"""The ssh engine: one `paradvisor launch` starts torchrun on every node of a preset over the system ssh
client, the way DeepSpeed's multi-node runner does (per-node --node-rank and process count, the c10d
rendezvous on the first node, the same run name everywhere), and keeps one status for the whole run.

- Reachability first: every host is checked in parallel the way `detect --host` does (ssh BatchMode,
  ConnectTimeout); an unreachable host fails the run before anything starts anywhere.
- Each node runs `python3 -m paradvisor.launch.nodeagent` (launch/nodeagent.py) over its own ssh session:
  argv quoted for the remote shell (shlex), the plan and settings sent as one JSON line on stdin, nothing
  from the preset ever parsed by a shell. The agent streams the node's logs, metrics and samples back;
  they land in this machine's run directory under the names a local run uses, so `monitor`, `validate` and
  the TUI read a multi-node run like any other (every metrics and sample record carries its `node`).
- Bounded failure: an unreachable host fails the run within the ssh timeout; a node whose agent cannot
  start, within the time its ssh session takes to end; a node that never joins the rendezvous, within
  launch.join_timeout_s (torchrun's own join_timeout on every node, and this launcher's deadline of
  join_timeout_s + JOIN_GRACE_S). A failed rank on any node stops every node. Ctrl-C, SIGTERM and the TUI's
  stop send every agent a stop; closing the ssh sessions (this launcher killed) stops them too.

Run directory additions: nodes.json (per node: host, rendezvous address, state, ranks and their pids,
reason), ssh-nodeN.log (the ssh client's and the agent's stderr), status-nodeN.json / launcher-nodeN.log /
command-nodeN.json (each node's own), samples.jsonl (every node's GPU/CPU readings).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from paradvisor import interrupts
from paradvisor.errors import InputError
from paradvisor.hardware.remote import check_reachable, parse_host, resolve_address, ssh_base
from paradvisor.launch import bundle, ckptcopy, datacopy
from paradvisor.launch.argv import forwarded_env, split_endpoint
from paradvisor.launch.diagnose import node_blame
from paradvisor.launch.fetch import fetch_outputs
from paradvisor.launch.preflight import validate
from paradvisor.monitor.follow import failure_text
from paradvisor.monitor.predict import launch_prediction
from paradvisor.output import one_line
from paradvisor.rundir import LINE_FILES, RunDir
from paradvisor.rundir import tail_lines as _tail
from paradvisor.rundir.lock import prepare_run_dir
from paradvisor.rundir.status import typed_status, write_aborted, write_json_atomic
from paradvisor.safeio import append_private, open_private, write_private
from paradvisor.spec.preset import DEFAULT_RDZV_PORT, Preset, plan_toml, write_run_plan

DEFAULT_SSH_TIMEOUT_S = 10.0
JOIN_GRACE_S = 15.0  # the agent's start (python, torch import) before its torchrun joins the rendezvous
PEER_GRACE_S = 5.0  # a node failing of a peer's error waits this long for the peer's own report
STOP_GRACE_S = 25.0  # a stopped agent ends its ranks (SIGTERM, 10 s, SIGKILL) within this
NO_AGENT_GRACE_S = 3.0  # a session whose agent never said hello gets this long to end after its input closes
LINE_LIMIT = 8 << 20
_FILE = re.compile(
    r"^(rank-\d+\.(stdout\.log|stderr\.log|exit\.json)|metrics\.jsonl|samples\.jsonl|"
    r"launcher-node(\d+)\.log|status-node(\d+)\.json|command-node(\d+)\.json|"
    r"torchelastic-error-node(\d+)\.json)$"
)
_MERGED = LINE_FILES  # metrics.jsonl, samples.jsonl
_RANK = re.compile(r"^rank-(\d{1,9})\.")  # a node's agent writes only the files of its own ranks
AGENT_FACTS = {"pid": int, "host": str, "run_dir": str, "version": str, "python": str}


def _agent_facts(msg: dict) -> dict:
    """An agent's hello, typed: an int pid, one-line strings of at most 500 characters, nothing else."""
    out = {}
    for key, typ in AGENT_FACTS.items():
        v = msg.get(key)
        if isinstance(v, typ) and not isinstance(v, bool):
            out[key] = one_line(v)[:500] if isinstance(v, str) else v
    return out


@dataclass
class NodeSession:
    index: int
    host: str  # as written in launch.hosts ([user@]host[:port])
    address: str  # the host name ssh connects to (ssh -G), used for the rendezvous on node 0
    procs: int
    argv: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    state: str = "pending"  # pending, starting, running, joined, finished, failed, cancelled, unreachable
    reason: str | None = None
    agent: dict = field(default_factory=dict)
    pids: dict = field(default_factory=dict)
    final: dict | None = None
    error: str | None = None
    ended: float | None = None
    reader: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def label(self) -> str:
        return f"node {self.index} ({self.host})"

    def doc(self) -> dict:
        return {
            "node": self.index,
            "host": self.host,
            "address": self.address,
            "procs": self.procs,
            "state": self.state,
            "reason": self.reason,
            "ranks": sorted(int(r) for r in self.pids),
            "rank_pids": dict(sorted(self.pids.items(), key=lambda kv: int(kv[0]))),
            "agent_pid": self.agent.get("pid"),
            "agent_host": self.agent.get("host"),
            "remote_run_dir": self.agent.get("run_dir"),
        }


class SshLaunch:
    """A run over ssh: `wait()` runs it to the end and returns the final status (a launch/handle.py RunHandle)."""

    def __init__(
        self,
        preset: Preset,
        run_dir: Path,
        nodes: list[NodeSession],
        *,
        endpoint: str,
        locks: list,
        ssh_config: str | None,
        ssh_timeout: float,
        env: dict,
        code: bytes | None = None,
        data: datacopy.DataPush | None = None,
    ):
        import psutil

        self.code = code  # the user's script folder (launch/bundle.py), sent to every node in its hello
        self.data = data  # the tokenized corpus the nodes read instead of the data path (launch/datacopy.py)
        self.preset, self.run_dir, self.nodes, self.endpoint = preset, run_dir, nodes, endpoint
        self.locks, self.ssh_config, self.ssh_timeout, self.env = locks, ssh_config, ssh_timeout, env
        self.copies = ckptcopy.for_run(preset, run_dir, len(nodes), self.log)  # checkpoints copied here
        if data is not None:
            data.log = self.log
        self.status_path = RunDir(run_dir).status
        self.cancel_requested, self.cancel_reason = False, "stopped by the user"
        self.started = time.time()
        self.done = threading.Event()
        self.argv = nodes[0].argv
        self.merge_lock = threading.Lock()
        self.rank_owner: dict[int, int] = {}  # global rank -> the node whose agent named it first (`_owns`)
        self.owner_lock = threading.Lock()
        self.log_lock = threading.Lock()
        lau = preset.launch
        self.join_bound_s = lau.join_timeout_s + JOIN_GRACE_S
        self.hang_detection = (
            f"ssh engine: {len(nodes)} node{'s' if len(nodes) != 1 else ''}; an unreachable host fails the run "
            f"within the ssh timeout ({ssh_timeout:g} s), a node that never joins within {lau.join_timeout_s:g} s "
            f"(launch.join_timeout_s; at most {self.join_bound_s:g} s); each node's hang "
            "detection as for a local run"
        )
        me = psutil.Process()
        self.identity = {
            "launcher_pid": os.getpid(),
            "launcher_started": me.create_time(),
            "pid": os.getpid(),
            "pid_started": me.create_time(),
        }

    # ------------------------------------------------------------------------------------------ interface
    def cancel(self, reason: str = "stopped by the user", *, graceful: bool = False) -> None:
        """Stop every node (each node's agent stops its ranks; `graceful` is not told apart here yet)."""
        if not self.cancel_requested:
            self.cancel_reason = reason
        self.cancel_requested = True

    def running(self) -> bool:
        return not self.done.is_set()

    def status(self, **kw) -> dict:
        doc = {
            "schema": "paradvisor.status/1",
            "status": "running",
            "engine": "ssh",
            "run_dir": str(self.run_dir),
            "name": self.preset.name,
            "started": self.started,
            "world_size": self.preset.plan.world_size,
            "node_rank": 0,
            "label": self.preset.plan.label(),
            "rdzv_endpoint": self.endpoint,
            "command": self.argv,
            **self.identity,
            "hang_timeout_s": None,
            "hang_detection": self.hang_detection,
            "nodes": [n.doc() for n in self.nodes],
            **getattr(self, "lineage", {}),
        }
        doc.update(kw)
        return doc

    def wait(self, poll: float = 0.2) -> dict:
        try:
            doc = self._wait(poll)
        except BaseException as exc:  # never leave nodes running, whatever went wrong here
            state = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            why = f"the ssh launcher failed: {type(exc).__name__}: {exc}"[:1000]
            try:
                self._stop_all(f"the launching machine failed: {type(exc).__name__}")
                doc = self._final(state, reason=why)
            except Exception:  # noqa: BLE001 (the final status is written whatever the node table holds)
                doc = {
                    "schema": "paradvisor.status/1",
                    "status": state,
                    "reason": why,
                    "engine": "ssh",
                    "run_dir": str(self.run_dir),
                    "name": self.preset.name,
                    "started": self.started,
                    "ended": time.time(),
                }
            raise
        finally:
            if "doc" in locals():
                write_json_atomic(self.status_path, doc)
                self._write_nodes()
            for lock in self.locks:
                lock.close()
            self.done.set()
        return doc

    # -------------------------------------------------------------------------------------------- running
    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}\n".encode(errors="replace")
        with self.log_lock:
            append_private(RunDir(self.run_dir).launcher_log(), line)

    def _write_nodes(self) -> None:
        write_json_atomic(
            RunDir(self.run_dir).nodes,
            {
                "schema": "paradvisor.nodes/1",
                "engine": "ssh",
                "rdzv_endpoint": self.endpoint,
                "nodes": [n.doc() for n in self.nodes],
            },
        )

    def _precheck(self) -> list[tuple[NodeSession, str]]:
        def one(n: NodeSession):
            return n, check_reachable(n.host, timeout=self.ssh_timeout, ssh_config=self.ssh_config)

        with ThreadPoolExecutor(max_workers=min(32, len(self.nodes))) as pool:
            results = list(pool.map(one, self.nodes))
        return [(n, why) for n, (ok, why) in results if not ok]

    def _hello(self, n: NodeSession) -> bytes:
        lau = self.preset.launch
        return (
            json.dumps(
                {
                    "plan": plan_toml(self.preset),
                    "run_name": self.run_dir.name,
                    "node": n.index,
                    "endpoint": self.endpoint,
                    "remote_dir": lau.remote_dir,
                    "env": self.env,
                    **({"code": base64.b64encode(self.code).decode()} if self.code else {}),
                    **(self.copies.hello() if self.copies else {}),
                    **(self.data.hello() if self.data else {}),
                }
            )
            + "\n"
        ).encode()

    def _spawn(self, n: NodeSession) -> None:
        log = open_private(RunDir(self.run_dir).ssh_log(n.index), append=True)
        try:
            # Its own session: Ctrl-C in this terminal reaches this launcher, which stops every node in order.
            n.proc = subprocess.Popen(
                n.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True
            )
        except OSError as exc:
            n.state, n.reason, n.ended = "failed", f"cannot run ssh: {exc.strerror or exc}", time.time()
            return
        finally:
            os.close(log)
        n.state = "starting"
        try:
            n.proc.stdin.write(self._hello(n))
            n.proc.stdin.flush()
            if self.copies:
                self.copies.send_push(n.proc.stdin)
        except OSError:
            pass  # the session already ended: its exit code says why
        n.reader = threading.Thread(
            target=self._read, args=(n,), daemon=True, name=f"paradvisor-ssh-{n.index}"
        )
        n.reader.start()
        self.log(f"{n.label}: started: {shlex.join(n.argv)}")

    def _spawn_all(self) -> None:
        """Every node's session, then the tokenized corpus to every node at once (before the join deadline)."""
        for n in self.nodes:
            self._spawn(n)
        if self.data:  # a node that takes nothing for join_timeout_s is closed (it would never join either)
            live = [(n.index, n.proc) for n in self.nodes if n.proc is not None]
            self.data.push(live, stall_s=self.preset.launch.join_timeout_s)

    def _owns(self, n: NodeSession, rank: int) -> bool:
        """Whether global rank `rank` is node n's: the rendezvous decides which node gets which ranks, so a
        rank belongs to the first node that names it, and a node names at most its own process count."""
        with self.owner_lock:
            owner = self.rank_owner.get(rank)
            if owner is None and rank < self.preset.plan.world_size:
                mine = sum(1 for o in self.rank_owner.values() if o == n.index)
                if mine < n.procs:
                    self.rank_owner[rank] = owner = n.index
            return owner == n.index

    def _store(self, n: NodeSession, name: str, data: bytes, whole: bool) -> None:
        m = _FILE.match(name)
        node_no = next((g for g in (m.groups()[2:] if m else ()) if g is not None), None)
        rank = _RANK.match(name)
        if (
            m is None
            or (node_no is not None and int(node_no) != n.index)
            or (rank is not None and not self._owns(n, int(rank.group(1))))
        ):
            self.log(f"{n.label}: ignored a file the agent may not write here: {name[:80]!r}")
            return
        path = self.run_dir / name
        if whole:
            write_private(path, data.decode(errors="replace"))
            return
        fd = open_private(path, append=True)
        try:
            if name in _MERGED:
                with self.merge_lock:  # whole lines from every node, never interleaved
                    os.write(fd, data)
            else:
                os.write(fd, data)
        finally:
            os.close(fd)

    def _read(self, n: NodeSession) -> None:
        for raw in iter(lambda: n.proc.stdout.readline(LINE_LIMIT), b""):
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # a login banner or the like on the node's stdout
            if not isinstance(msg, dict):
                continue
            t = msg.get("t")
            try:
                if (
                    t in ("append", "whole")
                    and isinstance(msg.get("f"), str)
                    and isinstance(msg.get("b"), str)
                ):
                    self._store(n, msg["f"], base64.b64decode(msg["b"]), t == "whole")
                elif t in ckptcopy.KINDS and self.copies is not None:
                    self.copies.take(n.index, msg)
                elif t == "hello":
                    n.agent = _agent_facts(msg)
                    with n.lock:
                        if n.state == "starting":
                            n.state = "running"
                    self.log(
                        f"{n.label}: agent pid {n.agent.get('pid')} on {n.agent.get('host')}, run directory "
                        f"{n.agent.get('run_dir')}"
                    )
                elif t == "ranks" and isinstance(msg.get("pids"), dict):
                    n.pids = {  # only this node's own ranks (`_owns`), with plausible pids
                        str(k): v
                        for k, v in list(msg["pids"].items())[: n.procs]
                        if k.isascii()
                        and k.isdigit()
                        and len(k) < 10
                        and self._owns(n, int(k))
                        and isinstance(v, int)
                        and not isinstance(v, bool)
                        and 0 < v < 2**31
                    }
                    with n.lock:
                        if n.state in ("starting", "running"):
                            n.state = "joined"
                    self.log(f"{n.label}: joined; ranks {', '.join(sorted(n.pids, key=int))}")
                    self._write_nodes()
                elif t == "error":
                    reason = msg.get("reason")
                    n.error = one_line(reason if isinstance(reason, str) else f"(a {type(reason).__name__})")[
                        :1000
                    ]
                elif t == "end" and isinstance(msg.get("status"), dict):
                    n.final = typed_status(msg["status"], "the node's final status")
                    if isinstance(n.final.get("reason"), str):
                        n.final["reason"] = one_line(n.final["reason"])
            except (OSError, ValueError, TypeError) as exc:
                self.log(f"{n.label}: could not store what the agent sent: {exc}")

    def _settle(self, n: NodeSession) -> None:
        """Turn a node whose ssh session ended into finished / failed / cancelled / unreachable."""
        if n.proc is None or n.ended is not None:
            return
        rc = n.proc.poll()
        if rc is None:
            return
        if n.reader is not None:
            n.reader.join(timeout=5)
        n.ended = time.time()
        if n.final is not None:
            n.state = {"finished": "finished", "cancelled": "cancelled"}.get(n.final.get("status"), "failed")
            n.reason = failure_text(n.final)
        elif n.error:
            n.state, n.reason = "failed", f"the node refused the run: {n.error}"
        else:
            lines = [ln for ln in _tail(RunDir(self.run_dir).ssh_log(n.index), 20) if ln.strip()]
            last = lines[-1].strip() if lines else ""
            if rc == 255 and not n.agent:
                n.state, n.reason = "unreachable", f"ssh failed: {last or 'exit code 255'}"
            elif not n.agent:
                n.state, n.reason = (
                    "failed",
                    (
                        f"the agent did not start (exit code {rc}): "
                        f"{last or 'no output'}; is paradvisor installed for "
                        f"{self.preset.launch.remote_python!r} there?"
                    ),
                )
            else:
                n.state, n.reason = (
                    "failed",
                    f"the node's session ended (exit code {rc}) without a status: {last}",
                )
        self.log(f"{n.label}: {n.state}" + (f": {n.reason}" if n.reason else ""))

    def _stop_all(self, reason: str) -> None:
        live = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        for n in live:
            try:
                n.proc.stdin.write((json.dumps({"cmd": "stop", "reason": reason}) + "\n").encode())
                n.proc.stdin.flush()
                n.proc.stdin.close()
            except (OSError, ValueError):
                pass
        if live:
            self.log(f"stopping {len(live)} node(s): {reason}")
        start = time.monotonic()
        # an agent ends its ranks first (up to STOP_GRACE_S); a session whose agent never started has nothing to end
        grace = {n.index: STOP_GRACE_S if n.agent else NO_AGENT_GRACE_S for n in live}
        while any(n.proc.poll() is None and time.monotonic() - start < grace[n.index] for n in live):
            time.sleep(0.1)
        for n in live:  # no answer: closing its ssh session ends it (the agent stops at the end of its input)
            if n.proc.poll() is None:
                self.log(
                    f"{n.label}: no answer to the stop within {grace[n.index]:g} s; closing its ssh session"
                )
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(n.proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        n.proc.wait(timeout=5)
                        break
                    except subprocess.TimeoutExpired:
                        continue
        for n in self.nodes:
            self._settle(n)

    def _fetch_outputs(self) -> str:
        """Rank 0's node's model/ and tensorboard/ copied into this run (launch/fetch.py); what happened."""
        n = self.nodes[self.rank_owner.get(0, 0)]
        if not n.agent.get("run_dir"):
            return f"node {n.index} never said where its run directory is"
        base = ssh_base(n.host, timeout=self.ssh_timeout, ssh_config=self.ssh_config)
        line = fetch_outputs(base, n.agent["run_dir"], self.run_dir, node=n.index)
        self.log(f"outputs: {line}")
        return line

    def _final(self, status: str, **kw) -> dict:
        ended = time.time()
        return self.status(
            status=status,
            ended=ended,
            duration_s=ended - self.started,
            returncode=0 if status == "finished" else 1,
            **kw,
        )

    def _failure(self, root: NodeSession) -> dict:
        f = root.final or {}
        why = root.reason or "failed"
        out = {
            "failed_node": root.index,
            "failed_host": root.host,
            "failed_rank": f.get("failed_rank"),
            "exit_code": f.get("exit_code"),
            "hung": bool(f.get("hung")),
            "last_log_lines": f.get("last_log_lines") or [],
            "rank_exit_codes": f.get("rank_exit_codes") or {},
        }
        if f.get("failed_rank") is not None:  # failure_text adds "rank R exit code C:" in front
            why = f.get("reason") or why
        out["reason"] = f"{why} — on {root.label}; every node was stopped"
        if f.get("oom"):
            out["oom"] = True
        return out

    def _wait(self, poll: float) -> dict:
        self.log(f"checking {len(self.nodes)} host(s) over ssh (timeout {self.ssh_timeout:g} s)")
        bad = self._precheck()
        if bad:
            for n, why in bad:
                n.state, n.reason = "unreachable", why
                self.log(f"{n.label}: unreachable: {why}")
            n, why = bad[0]
            return self._final(
                "failed",
                failed_node=n.index,
                failed_host=n.host,
                failed_rank=None,
                exit_code=None,
                reason=f"{n.label} is unreachable: {why}; nothing was started on any node",
                last_log_lines=[f"{m.label}: {w}" for m, w in bad],
            )
        if self.cancel_requested:
            return self._final("cancelled", reason=self.cancel_reason)
        self._spawn_all()
        self._write_nodes()
        write_json_atomic(self.status_path, self.status())
        join_deadline = time.monotonic() + self.join_bound_s
        first_failure = None
        last_states = None
        while True:
            for n in self.nodes:
                self._settle(n)
            states = [n.state for n in self.nodes]
            if states != last_states:
                last_states = states
                self._write_nodes()
                write_json_atomic(self.status_path, self.status())
            if self.cancel_requested:
                self._stop_all(self.cancel_reason)
                return self._final("cancelled", reason=self.cancel_reason)
            if all(s == "finished" for s in states):
                return self._final("finished", outputs=self._fetch_outputs())
            failed = [n for n in self.nodes if n.state in ("failed", "unreachable", "cancelled")]
            if failed:
                now = time.monotonic()
                first_failure = first_failure or now
                root = min(failed, key=lambda n: (node_blame(n.final), n.ended or 0))
                settled = all(n.ended is not None for n in self.nodes)
                late = [n for n in self.nodes if n.state in ("starting", "running") and not n.pids]
                # the rendezvous failed: blame the node that never came
                if node_blame(root.final) == 1 and late:
                    return self._never_joined(late, f"{root.label}: {root.reason}")
                if node_blame(root.final) == 0 or settled or now - first_failure > PEER_GRACE_S:
                    if node_blame(root.final) == 1 and late:
                        return self._never_joined(late, f"{root.label}: {root.reason}")
                    self._stop_all(f"{root.label} failed")
                    return self._final("failed", **self._failure(root))
            elif time.monotonic() > join_deadline and any(not n.pids for n in self.nodes):
                return self._never_joined([n for n in self.nodes if not n.pids], None)
            time.sleep(poll)

    def _never_joined(self, missing: list[NodeSession], seen: str | None) -> dict:
        late = [n for n in missing if not n.agent] or missing
        what = "its agent never started" if not late[0].agent else "its ranks never started"
        reason = (
            f"{', '.join(m.label for m in late)} did not join the rendezvous within "
            f"{self.preset.launch.join_timeout_s:g} s (launch.join_timeout_s; {what})"
        )
        self._stop_all(reason)
        lines = [seen] if seen else []
        return self._final(
            "failed",
            failed_node=late[0].index,
            failed_host=late[0].host,
            failed_rank=None,
            exit_code=None,
            reason=reason + "; every node was stopped",
            last_log_lines=lines,
        )


def plan_nodes(
    preset: Preset, *, ssh_config: str | None, ssh_timeout: float
) -> tuple[list[NodeSession], str]:
    """The node sessions (ssh argv for each node) and the rendezvous endpoint (node 0's address)."""
    lau = preset.launch
    for h in lau.hosts:
        try:
            parse_host(h)
        except InputError as exc:
            raise InputError(str(exc), where=f"{preset.path or 'preset'}: launch.hosts") from None
    addresses = [resolve_address(h, ssh_config=ssh_config) for h in lau.hosts]
    if lau.rdzv_endpoint:
        split_endpoint(lau.rdzv_endpoint)
        endpoint = lau.rdzv_endpoint
    else:
        endpoint = f"{addresses[0]}:{lau.master_port or DEFAULT_RDZV_PORT}"
    # one word per argument there
    remote = shlex.join([lau.remote_python, "-m", "paradvisor.launch.nodeagent"])
    nodes = []
    for i, host in enumerate(lau.hosts):
        n = NodeSession(index=i, host=host, address=addresses[i], procs=lau.procs(i))
        n.argv = ssh_base(host, timeout=ssh_timeout, ssh_config=ssh_config) + [remote]
        nodes.append(n)
    return nodes, endpoint


def start(
    preset: Preset,
    *,
    runs_dir: Path,
    run_dir: Path | None = None,
    env: dict | None = None,
    ssh_config: str | None = None,
    ssh_timeout: float | None = None,
    hold: bool = False,
) -> SshLaunch:
    ssh_config = ssh_config or os.environ.get("PARADVISOR_SSH_CONFIG") or None
    if ssh_config and not Path(ssh_config).is_file():
        raise InputError("the ssh config file does not exist", where=ssh_config)
    timeout = ssh_timeout or DEFAULT_SSH_TIMEOUT_S
    lau = preset.launch
    if len(lau.hosts) != lau.nnodes:
        raise InputError(
            f"the ssh engine needs one host per node: {len(lau.hosts)} host(s) for {lau.nnodes} node(s)",
            where=f"{preset.path or 'preset'}: launch.hosts",
        )
    nodes, endpoint = plan_nodes(preset, ssh_config=ssh_config, ssh_timeout=timeout)
    preset = replace(preset, launch=replace(lau, rdzv_endpoint=endpoint, node_rank=0))
    validate(preset, reach=False)  # every node checks again, with its own data paths and devices
    data = datacopy.for_run(preset)  # tokenized here first when the nodes do not read the data path
    code = bundle.for_nodes(preset)  # the user's script folder, unless on a shared path
    run_dir, locks, held = prepare_run_dir(run_dir, runs_dir, preset)
    try:
        interrupts.release(held)  # a Ctrl-C since the folder's making: its status written below
        write_run_plan(RunDir(run_dir).plan, preset)
        write_json_atomic(RunDir(run_dir).prediction, launch_prediction(preset).to_doc())  # every run has one
        write_json_atomic(
            RunDir(run_dir).node_file("command", 0),
            {
                "engine": "ssh",
                "cwd": os.getcwd(),
                "rdzv_endpoint": endpoint,
                "nodes": [{"node": n.index, "host": n.host, "argv": n.argv} for n in nodes],
            },
        )
        write_private(
            RunDir(run_dir).command_txt,
            "".join(f"# node {n.index}: {n.host}\n{shlex.join(n.argv)}\n" for n in nodes),
        )
        launch = SshLaunch(
            preset,
            run_dir,
            nodes,
            endpoint=endpoint,
            locks=locks,
            ssh_config=ssh_config,
            ssh_timeout=timeout,
            env=forwarded_env(env),
            code=code,
            data=data,
        )
        write_json_atomic(launch.status_path, launch.status())
        with interrupts.held_for(launch, keep=hold):  # the run exists: hold as runner.start does
            launch._write_nodes()
        return launch
    except BaseException as exc:  # Ctrl-C or a failure before the status: never a folder without one
        write_aborted(RunDir(run_dir).status, preset, exc)
        for lock in locks:
            lock.close()
        raise
