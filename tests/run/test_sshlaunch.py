"""The ssh engine against a real sshd on loopback "hosts" (127.0.0.1, 127.0.0.2): each host a torchrun node with
its own node rank, started by one `paradvisor launch` over the system ssh client. No fake ssh, no fake torchrun.

Covered: a run of the user's model and data that finishes (the tokenized corpus copied to each node; logs,
metrics, per-node samples, model/ and tensorboard/ back in one run directory), an unreachable node,
a node that never joins, a rank killed on the second node, and a cancel — each ending with one status for the
whole run and no process left on any "host"."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest
import tomli_w

from tests.conftest import REPO
from tests.support.runs import launch_argv, rank_log_tails, wait_for
from tests.support.sshd import Sshd, free_port
from tests.support.userdata import check_user_run, user_losses, user_preset

# xdist_group: the module fixture (a cluster, shared reference runs) is made once, on one worker
pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.xdist_group("sshlaunch")]

SMOKE = REPO / "presets" / "tiny-cpu-smoke.toml"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("sshcluster")
    server = Sshd(d, ("127.0.0.1", "127.0.0.2"), accept_env=("PYTHONPATH",))
    if os.environ.get("PYTHONPATH"):  # the nodes import this checkout's paradvisor, as the tests do
        server.config.write_text(
            server.config.read_text() + f"  SetEnv PYTHONPATH={os.environ['PYTHONPATH']}\n"
        )
    yield {"sshd": server, "dir": d}
    server.stop()


def write_preset(cluster, tmp_path, *, hosts=None, steps=10, join_timeout=60, python=None) -> Path:
    port = cluster["sshd"].port
    hosts = hosts or [f"127.0.0.1:{port}", f"127.0.0.2:{port}"]
    text = SMOKE.read_text().replace(
        "[launch]\nnproc_per_node = 2",
        (
            f"[launch]\nnproc_per_node = 1\nnnodes = 2\nhosts = {json.dumps(hosts)}\nmaster_port = {free_port()}\n"
            f"remote_python = {json.dumps(python or sys.executable)}\nremote_dir = {json.dumps(str(tmp_path / 'nodes'))}\n"
            f"join_timeout_s = {join_timeout}"
        ),
    )
    text = text.replace("steps = 10", f"steps = {steps}")
    p = tmp_path / "two-nodes.toml"
    p.write_text(text)
    return p


def the_run(tmp_path: Path) -> Path | None:
    """The test's one run directory; None while there is none yet (the runs folder is made just before it)."""
    runs = list((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else []
    assert len(runs) <= 1, runs
    return runs[0] if runs else None


def this_worker(p: psutil.Process, worker: str) -> bool:
    """An agent (or its ssh client) of this xdist worker's sshd, whose config lies in the worker's temporary
    folder, not of a run another worker's test has going at the same time."""
    return any(worker in " ".join(q.cmdline()) for q in [p, *p.parents()])


def leftovers(tmp_path: Path) -> list[str]:
    """Processes of this test's run on any "host" (they are all this machine): agents, torchrun, ranks, ssh."""
    mark = str(tmp_path)
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if (
                mark in cmd
                or (
                    "paradvisor.launch.nodeagent" in cmd
                    and p.pid != os.getpid()
                    and this_worker(p, str(tmp_path.parent))
                )
                or ("paradvisor.train" in cmd and mark in " ".join(p.cmdline()))
            ):
                out.append(f"{p.pid}: {cmd[:160]}")
        except psutil.Error:
            continue
    return out


def assert_nothing_left(tmp_path: Path) -> None:
    deadline = time.monotonic() + 15
    while leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(tmp_path) == []


def records(run: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def steps_on_both_nodes(run: Path):
    try:
        recs = records(run, "metrics.jsonl")
    except (OSError, ValueError):
        return False
    return {r["node"] for r in recs if r.get("kind") == "step"} == {0, 1}


def running(cluster, tmp_path):
    """A long two-node run, started in the background, once both nodes log steps: (launch process, run dir)."""
    preset = write_preset(cluster, tmp_path, steps=100000)
    proc = subprocess.Popen(
        launch_argv(preset, tmp_path / "runs", ssh_config=cluster["sshd"].config),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    try:
        run = wait_for(lambda: (tmp_path / "runs").exists() and the_run(tmp_path), 60, "run directory", proc)
        wait_for(lambda: steps_on_both_nodes(run), 180, "steps from both nodes", proc)
    except BaseException:
        proc.kill()
        raise
    return proc, run


def test_two_ssh_nodes_train_the_users_data_with_everything_back_in_one_run_directory(cluster, tmp_path, cli):
    """The user's model folder and JSONL corpus (issue 28) on two ssh nodes, at a data path the nodes cannot read
    (`~/data/...` with the launcher's HOME elsewhere): the launcher tokenizes and copies the cache entry to each
    node over its ssh session; each node's ranks read their checked copy, byte for byte the launcher's. Every
    rank's logs, metrics and samples, node 0's model/ and tensorboard/ come back into one run directory; monitor
    and the TUI show each node. (The data on a path declared shared: its dry-run line and cache naming are
    checked in tests/run/test_datacopy.py, without a second ssh run.)"""
    port = cluster["sshd"].port
    home = tmp_path / "home"  # the launcher's HOME: ~/data/corpus.jsonl exists here, not on the nodes
    if (Path(pwd.getpwuid(os.getuid()).pw_dir) / "data" / "corpus.jsonl").exists():  # sshd's HOME
        pytest.skip("~/data/corpus.jsonl exists on the nodes (this machine's HOME)")
    nodes = {
        "nproc_per_node": 1,
        "nnodes": 2,
        "hosts": [f"127.0.0.1:{port}", f"127.0.0.2:{port}"],
        "master_port": free_port(),
        "remote_python": sys.executable,
        "remote_dir": str(tmp_path / "nodes"),
        "join_timeout_s": 60,
    }
    preset = user_preset(tmp_path, data=home / "data" / "corpus.jsonl", **nodes)
    doc = tomllib.loads(preset.read_text())
    doc["train"].update(data_path="~/data/corpus.jsonl", cache_dir=str(tmp_path / "cache-copied"))
    preset.write_text(tomli_w.dumps(doc))
    env = {**os.environ, "HOME": str(home)}

    def ssh_launch(*extra: str):
        argv = launch_argv(preset, tmp_path / "runs", *extra, ssh_config=cluster["sshd"].config)
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=400, cwd=str(tmp_path), env=env, check=False
        )

    dry = ssh_launch("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert (
        "data: tokenized here at launch (not in the cache yet), then copied to each of 2 nodes; the nodes never "
        "read ~/data/corpus.jsonl (not on launch.shared_paths)"
    ) in dry.stderr  # the shared run's line: tests/run/test_datacopy.py

    proc = ssh_launch()
    assert proc.returncode == 0, proc.stderr[-3000:] + rank_log_tails(tmp_path / "runs", tmp_path / "nodes")
    assert "copied to each of 2 nodes" in proc.stderr
    run = the_run(tmp_path)
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "finished" and status["engine"] == "ssh"
    assert "copied from node " in status["outputs"], status["outputs"]  # the node of global rank 0
    check_user_run(run)  # its model/ came home over ssh and loads in transformers
    assert list((run / "tensorboard").rglob("events.out.tfevents.*"))
    assert len(user_losses(run)) >= 10
    [entry] = [m.parent for m in (tmp_path / "cache-copied").glob("*/meta.json")]  # tokenized once, here
    log = (run / "launcher.log").read_text()
    assert f"data: tokenized corpus {entry.name} copied to 2 node(s): " in log, log
    for node in (0, 1):  # each node's ranks read their own checked copy, never the data path
        plan = tomllib.loads((tmp_path / "nodes" / run.name / f"node{node}" / "plan.toml").read_text())
        got = Path(plan["train"]["tokenized"])
        assert got == tmp_path / "nodes" / run.name / f".corpus-node{node}" / entry.name
        for f in ("train.bin", "eval.bin", "meta.json"):
            assert (got / f).read_bytes() == (entry / f).read_bytes()

    for node in (
        0,
        1,
    ):  # each node's first process announces the evals and the export to its node's hang clock
        recs = [
            json.loads(ln) for ln in (tmp_path / "nodes" / run.name / f"node{node}" / "metrics.jsonl").open()
        ]
        # which global rank a node's process gets is the rendezvous's choice: node0/ may hold rank 1
        got = {r["phase"] for r in recs if r["kind"] == "phase" and r["node"] == node}
        assert got >= {"eval", "export"}, (node, got)
    nodes = json.loads((run / "nodes.json").read_text())["nodes"]
    assert [n["state"] for n in nodes] == ["finished", "finished"]
    assert sorted(r for n in nodes for r in n["ranks"]) == [0, 1]
    assert {n["address"] for n in nodes} == {"127.0.0.1", "127.0.0.2"}
    # every rank's logs, exit marker and metrics came back, each record naming its node
    rank_node = {r: n["node"] for n in nodes for r in n["ranks"]}
    steps = [r for r in records(run, "metrics.jsonl") if r["kind"] == "step"]
    assert {(r["rank"], r["node"]) for r in steps} == set(rank_node.items())
    last = max(r["step"] for r in steps)
    assert last == 4
    for r in (0, 1):
        assert json.loads((run / f"rank-{r}.exit.json").read_text())["exit_code"] == 0
        assert (run / f"rank-{r}.stderr.log").exists()
    assert {s["node"] for s in records(run, "samples.jsonl")} == {0, 1}
    assert json.loads((run / "status-node1.json").read_text())["status"] == "finished"
    # the remote run directories have the same run name on every node
    assert {Path(n["remote_run_dir"]).parent.name for n in nodes} == {run.name}
    # `monitor` shows each node's readings and each rank's node
    mon = cli("monitor", str(run), "--json", "--once")
    assert mon.returncode == 0, mon.stderr
    doc = json.loads(mon.stdout)
    assert [n["node"] for n in doc["nodes"]] == [0, 1]
    assert all(n["sample"] is not None and n["state"] == "finished" for n in doc["nodes"])
    assert {(r["rank"], r["node"], r["step"]) for r in doc["ranks"]} == {
        (r, n, last) for r, n in rank_node.items()
    }
    text = cli("monitor", str(run), "--once")
    assert "node 1 (127.0.0.2:" in text.stdout and "rank 1" in text.stdout, text.stdout
    # the TUI's Monitor shows the same: a line per node with its own reading, each rank's node in the table
    tui_view_of(run, tmp_path)
    assert_nothing_left(tmp_path)


def tui_view_of(run: Path, tmp_path: Path) -> None:
    import asyncio

    from paradvisor.tui.app import ParadvisorApp

    async def flow():
        app = ParadvisorApp(cluster=None, runs_dir=str(tmp_path / "tui-runs"), live=False, open_run=str(run))
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.1)
                if app.run_summary is not None:
                    break
            await pilot.press("4")
            app.refresh_monitor()
            await pilot.pause(0.3)
            head = str(app.query_one("#run-status").render())
            assert "node 0 (127.0.0.1" in head and "node 1 (127.0.0.2" in head and "CPU" in head, head
            await pilot.press("v")
            table = app.query_one("#rank-table")
            assert sorted(str(table.get_row_at(i)[1]) for i in range(table.row_count)) == ["0", "1"]

    asyncio.run(flow())


def test_one_node_on_another_host_runs_there(cluster, tmp_path):
    """`launch --preset P --hosts gpubox` with a one-node plan ran on this machine and ignored the host (the ssh
    engine was chosen only for several nodes): it runs on that host, over ssh, and comes back like any ssh run."""
    port = cluster["sshd"].port
    text = SMOKE.read_text().replace(
        "[launch]\nnproc_per_node = 2",
        f"[launch]\nnproc_per_node = 2\nmaster_port = {free_port()}\nremote_python = {json.dumps(sys.executable)}\n"
        f"remote_dir = {json.dumps(str(tmp_path / 'nodes'))}",
    )
    preset = tmp_path / "one-node.toml"
    preset.write_text(text.replace("steps = 10", "steps = 3"))
    argv = launch_argv(
        preset, tmp_path / "runs", "--hosts", f"127.0.0.2:{port}", ssh_config=cluster["sshd"].config
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = the_run(tmp_path)
    assert (tmp_path / "nodes").is_dir(), "the node agent ran in the host's remote_dir"
    nodes = json.loads((run / "nodes.json").read_text())
    assert [n["host"] for n in nodes["nodes"]] == [f"127.0.0.2:{port}"]
    assert max(r["step"] for r in records(run, "metrics.jsonl") if r.get("kind") == "step") == 3
    assert_nothing_left(tmp_path)


def test_an_unreachable_node_fails_the_run_before_anything_starts(cluster, tmp_path):
    port = cluster["sshd"].port
    preset = write_preset(
        cluster, tmp_path, hosts=[f"127.0.0.1:{port}", f"127.0.0.2:{free_port('127.0.0.2')}"]
    )
    proc = subprocess.run(
        launch_argv(preset, tmp_path / "runs", ssh_config=cluster["sshd"].config),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    status = json.loads((the_run(tmp_path) / "status.json").read_text())
    assert status["status"] == "failed" and status["failed_node"] == 1
    assert "node 1 (127.0.0.2:" in status["reason"] and "refused" in status["reason"].lower()
    assert "node 1" in proc.stderr
    assert not (tmp_path / "nodes").exists()  # nothing was started on any node
    assert_nothing_left(tmp_path)


def test_a_node_that_never_joins_fails_the_run_within_the_join_timeout(cluster, tmp_path):
    # node 1's "python" never starts the agent (a node stuck before the rendezvous); node 0 is real
    stuck = tmp_path / "python-on-nodes"
    stuck.write_text(
        f'#!/bin/sh\ncase "$SSH_CONNECTION" in *127.0.0.2*) exec cat >/dev/null;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    stuck.chmod(0o755)
    preset = write_preset(cluster, tmp_path, join_timeout=5, python=str(stuck))
    proc = subprocess.run(
        launch_argv(preset, tmp_path / "runs", ssh_config=cluster["sshd"].config),
        capture_output=True,
        text=True,
        timeout=200,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 1, proc.stderr
    status = json.loads((the_run(tmp_path) / "status.json").read_text())
    assert status["status"] == "failed" and status["failed_node"] == 1, status
    assert "did not join the rendezvous within 5 s" in status["reason"]
    assert "node 1 (127.0.0.2:" in status["reason"]
    assert_nothing_left(tmp_path)


def failed_run(proc, run: Path) -> tuple[str, dict]:
    """Wait (bounded) for the launcher to end, killing it if it does not; it must exit 1. (its stderr, the
    run's status.json)"""
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    return err, json.loads((run / "status.json").read_text())


def test_a_rank_killed_on_the_second_node_fails_every_node(cluster, tmp_path):
    proc, run = running(cluster, tmp_path)
    try:
        nodes = json.loads((run / "nodes.json").read_text())["nodes"]
        [(rank, pid)] = nodes[1]["rank_pids"].items()
        victim = psutil.Process(pid)
        assert "node1" in " ".join(victim.cmdline())  # the rank runs from node 1's run directory
        victim.kill()
    except BaseException:
        proc.kill()
        raise
    err, status = failed_run(proc, run)
    assert status["status"] == "failed" and status["failed_node"] == 1, status
    assert status["failed_rank"] == int(rank) and status["exit_code"] == -signal.SIGKILL
    assert "SIGKILL" in status["reason"] and "every node was stopped" in status["reason"]
    assert f"rank {rank} exit code -9" in err
    node0 = json.loads((run / "status-node0.json").read_text())
    assert node0["status"] in ("failed", "cancelled")  # stopped, whichever came first
    assert_nothing_left(tmp_path)


# SIGINT takes the same handler (runner.run_blocking) as SIGTERM: the Slurm test sends SIGINT
@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_cancel_stops_every_node(cluster, tmp_path, sig):
    proc, run = running(cluster, tmp_path)
    try:
        proc.send_signal(sig)
    except BaseException:
        proc.kill()
        raise
    err, status = failed_run(proc, run)
    assert status["status"] == "cancelled" and signal.Signals(sig).name in status["reason"], err[-3000:]
    for i in (0, 1):
        assert json.loads((run / f"status-node{i}.json").read_text())["status"] == "cancelled"
    assert_nothing_left(tmp_path)


def test_dry_run_prints_one_quoted_ssh_command_per_node(cluster, tmp_path, cli):
    preset = write_preset(cluster, tmp_path)
    proc = cli("launch", "--preset", str(preset), "--ssh-config", str(cluster["sshd"].config), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ssh ")]
    assert len(lines) == 2 and all(
        "BatchMode=yes" in ln and "paradvisor.launch.nodeagent" in ln for ln in lines
    )
    assert "rendezvous at 127.0.0.1:" in proc.stderr
    assert not list(tmp_path.glob("runs"))
