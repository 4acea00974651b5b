"""Remote replies unbounded or trusted (issue 27, item 2): a real sshd whose hosts answer as an attacker would
(a forced command per loopback address: a flood, 100,000 GPUs, a list), hostile node agents (the preset's
`remote_python` is a script speaking the agent protocol with forged and ill-typed messages), and `sbatch`
printing job ids that are not job ids. Each host or node out of bounds or type is marked failed with the
reason, the others go on, and the run's final status is always written."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.runs import launch, variant
from tests.support.sshd import Sshd, free_port

SMOKE = REPO / "presets" / "tiny-cpu-smoke.toml"

HOSTILE_HOST = """#!/bin/sh
# sshd's forced command: what each loopback "host" answers, by the address the client connected to
case "$(echo "$SSH_CONNECTION" | cut -d' ' -f3)" in
  127.0.0.2) cat > /dev/null; exec yes 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' ;;
  127.0.0.3) cat > /dev/null; exec {python} -c 'import json; print(json.dumps({{"cpu": {{}}, "nvidia": {{"gpus": [{{"name": "H100"}}] * 100000}}}}))' ;;
  127.0.0.4) cat > /dev/null; echo '[1, 2, 3]' ;;
  *) exec sh -c "$SSH_ORIGINAL_COMMAND" ;;
esac
"""

HOSTILE_AGENT = """#!{python}
# speaks the node agent protocol (launch/nodeagent.py) as an attacker would
import base64, json, os, sys, time
hello = json.loads(sys.stdin.readline())
node = hello["node"]
def out(m):
    print(json.dumps(m), flush=True)
def b(s):
    return base64.b64encode(s.encode()).decode()
out({{"t": "hello", "pid": [1, 2], "host": "evil\\nFAKE: status finished", "run_dir": {{"a": 1}}}})
if node == 0:  # honest about its rank first
    out({{"t": "ranks", "pids": {{"0": os.getpid()}}}})
    out({{"t": "append", "f": "rank-0.stderr.log", "b": b("mine\\n")}})
    time.sleep(4)  # node 1 tries its forgeries meanwhile
else:  # then tries to take it over, and ranks that do not exist
    time.sleep(2)
    out({{"t": "whole", "f": "rank-0.exit.json", "b": b("forged by node 1")}})
    out({{"t": "append", "f": "rank-0.stderr.log", "b": b("forged by node 1\\n")}})
    out({{"t": "append", "f": "rank-7.stdout.log", "b": b("forged by node 1\\n")}})
    out({{"t": "ranks", "pids": {{"0": 1, "0x1": 2, "9" * 40: 3}}}})
    # checkpoint parts (launch/ckptcopy.py): a path out of the run, a file the manifest does not name, bytes
    # beyond a file's size, a part beyond the bound, an end with no beginning
    def part(step, files):
        out({{"t": "ckpt_begin", "s": step, "meta": json.dumps({{"files": files}})}})
    part(1, {{"../../ckpt-escape.log": [4, 0]}})
    out({{"t": "ckpt", "s": 1, "f": "../../ckpt-escape.log", "o": 0, "b": b("evil")}})
    part(2, {{"dcp/a": [4, 0]}})
    out({{"t": "ckpt", "s": 2, "f": "dcp/b", "o": 0, "b": b("evil")}})
    part(3, {{"dcp/a": [4, 0]}})
    out({{"t": "ckpt", "s": 3, "f": "dcp/a", "o": 0, "b": b("evil, and longer")}})
    part(4, {{"dcp/a": [10 ** 15, 0]}})
    out({{"t": "ckpt_end", "s": 5}})
out({{"t": "append", "f": "../../escape.log", "b": b("forged")}})
out({{"t": "error", "reason": {{"nested": ["table"] * 10}}}})
out({{"t": "end", "status": {{"status": ["finished"], "reason": ["a", "list"], "failed_rank": "x",
                             "exit_code": {{"t": 1}}, "last_log_lines": "not a list"}}}})
sys.exit(1)
"""


@pytest.fixture(scope="module")
def hostile_hosts(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile-sshd")
    server = Sshd(d, ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"), accept_env=("PYTHONPATH",))
    script = d / "hostile-host.sh"
    script.write_text(HOSTILE_HOST.format(python=sys.executable))
    script.chmod(0o755)
    keys = d / "authorized_keys"
    keys.write_text(f'command="{script}" ' + keys.read_text())
    if os.environ.get("PYTHONPATH"):
        server.config.write_text(
            server.config.read_text() + f"  SetEnv PYTHONPATH={os.environ['PYTHONPATH']}\n"
        )
    yield server
    server.stop()


@pytest.mark.ssh
@pytest.mark.slow
def test_hosts_that_flood_or_lie_are_offline_and_the_others_go_on(hostile_hosts):
    """A host answering with an endless stream, one claiming 100,000 GPUs, one with a JSON list: each is
    offline with its reason, in bounded time and memory; the honest host is probed."""
    port = hostile_hosts.port
    t0 = time.monotonic()
    argv = ["detect", "--json", "--no-local", "--ssh-config", str(hostile_hosts.config), "--timeout", "5"]
    for a in ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"):
        argv += ["--host", f"{a}:{port}"]
    proc = subprocess.run(
        ["prlimit", f"--as={3 << 30}", sys.executable, "-m", "paradvisor", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert time.monotonic() - t0 < 90
    assert len(proc.stdout) < 1 << 20  # never a document of megabytes
    nodes = {n["host"].split(":")[0]: n for n in doc["nodes"]}
    assert nodes["127.0.0.1"]["online"], nodes["127.0.0.1"]
    assert not nodes["127.0.0.2"]["online"] and "more than" in nodes["127.0.0.2"]["reason"]
    assert not nodes["127.0.0.3"]["online"] and "100,000 GPUs" in nodes["127.0.0.3"]["reason"]
    assert not nodes["127.0.0.4"]["online"] and "not an object" in nodes["127.0.0.4"]["reason"]


def _agent_preset(tmp_path: Path, port: int) -> Path:
    agent = tmp_path / "hostile-agent"
    agent.write_text(HOSTILE_AGENT.format(python=sys.executable))
    agent.chmod(agent.stat().st_mode | stat.S_IXUSR)
    text = SMOKE.read_text().replace(
        "[launch]\nnproc_per_node = 2",
        textwrap.dedent(f"""\
            [launch]
            nproc_per_node = 1
            nnodes = 2
            hosts = ["127.0.0.1:{port}", "127.0.0.1:{port}"]
            master_port = {free_port()}
            remote_python = {json.dumps(str(agent))}
            remote_dir = {json.dumps(str(tmp_path / "nodes"))}
            join_timeout_s = 30"""),
    )
    p = tmp_path / "hostile-agents.toml"
    p.write_text(text)
    return p


@pytest.mark.ssh
@pytest.mark.slow
def test_hostile_node_agents_cannot_crash_forge_or_overwrite(hostile_hosts, tmp_path):
    """Agents that send ill-typed hellos, rank files of the other node, a path outside the run, pids that are
    not pids, checkpoint parts that lie, and a final status made of lists: the launch ends failed (exit 1) with its final status written,
    no agent's file lands in another node's name, and no value prints a line of its own."""
    p = _agent_preset(tmp_path, hostile_hosts.port)
    proc, _ = launch(
        p,
        tmp_path / "runs",
        "--ssh-config",
        str(hostile_hosts.config),
        "--ssh-timeout",
        "5",
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not any(line.startswith("FAKE") for line in (proc.stdout + proc.stderr).splitlines())
    [run] = list((tmp_path / "runs").iterdir())
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed", status
    assert "forged" not in (run / "rank-0.stderr.log").read_text()
    assert not (run / "rank-0.exit.json").exists() and not (run / "rank-7.stdout.log").exists()
    assert not (tmp_path / "escape.log").exists()
    assert not list(tmp_path.rglob("ckpt-escape.log"))
    assert not list((run / "checkpoints").glob("*step-*")) if (run / "checkpoints").exists() else True
    nodes = json.loads((run / "nodes.json").read_text())["nodes"]
    for n in nodes:
        assert n["state"] == "failed"
        assert "\n" not in json.dumps(n.get("reason")).replace("\\n", "") and "FAKE" not in str(n.get("host"))
    log = (run / "launcher.log").read_text()
    assert not any(line.startswith("FAKE") for line in log.splitlines())
    assert log.count("not copied") == 4, log  # parts 1-4 dropped with their reason; 5 never began


# ---- Slurm: job ids and a failure after submission ------------------------------------------------------------------


def _fake_sbatch(tmp_path: Path, reply: str) -> dict:
    """A PATH where `sbatch` prints `reply` (the reply under test: no job is submitted)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(reply)}\n")
    sbatch.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize(
    "reply",
    ["١٢٣", "9" * 5000, "12 34", "-5", "0x1f", "123\x1b[2J"],
    ids=["arabic", "huge", "space", "neg", "hex", "esc"],
)
def test_a_job_id_that_is_not_one_is_refused(tmp_path, reply):
    p = variant(tmp_path, "jobid", train={"steps": 2})
    runs = tmp_path / "runs"
    proc, _ = launch(p, runs, "--submit", "slurm", env=_fake_sbatch(tmp_path, reply))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr) < 2000
    [run] = list(runs.iterdir())
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and "no job id" in status["reason"]
    assert not (run / "slurm.json").exists()
