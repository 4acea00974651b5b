"""The ssh probe against a real sshd started on 127.0.0.1 by this test (no fake)."""

from __future__ import annotations

import json
import os
import time

import pytest

from paradvisor.hardware.remote import probe_hosts
from tests.support.sshd import Sshd

pytestmark = pytest.mark.ssh


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    d = tmp_path_factory.mktemp("sshd")
    server = Sshd(d, ("127.0.0.1",), aliases={})
    server.config.write_text(
        f"Host pa-local\n  HostName 127.0.0.1\n  Port {server.port}\n{server.common}"
        f"Host pa-dead\n  HostName 127.0.0.1\n  Port {server.dead_port}\n{server.common}"
    )
    yield {"config": str(server.config), "port": server.port}
    server.stop()


def test_remote_probe_returns_the_same_json_as_local(sshd):
    [node] = probe_hosts(["pa-local"], ssh_config=sshd["config"], timeout=10)
    assert node.online, node.reason
    assert node.source == "ssh"
    assert node.cpu_logical == os.cpu_count()
    assert node.ram_total_bytes > 2**30


def test_unreachable_host_is_offline_with_reason_and_others_still_come_back(sshd):
    t0 = time.monotonic()
    nodes = probe_hosts(["pa-dead", "pa-local"], ssh_config=sshd["config"], timeout=3)
    assert time.monotonic() - t0 < 30
    dead, alive = nodes
    assert not dead.online and "refused" in dead.reason.lower()
    assert alive.online


def test_refusing_authentication_is_reported(sshd, tmp_path):
    cfg = tmp_path / "cfg"
    cfg.write_text(
        f"Host pa-nokey\n  HostName 127.0.0.1\n  Port {sshd['port']}\n  User nobody-here\n"
        "  IdentitiesOnly yes\n  IdentityFile /nonexistent\n  UserKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking no\n  LogLevel ERROR\n"
    )
    [node] = probe_hosts(["pa-nokey"], ssh_config=str(cfg), timeout=5)
    assert not node.online
    assert "denied" in node.reason.lower() or "permission" in node.reason.lower()


def test_detect_cli_with_hosts(cli, sshd):
    proc = cli(
        "detect",
        "--json",
        "--host",
        "pa-local",
        "--host",
        "pa-dead",
        "--ssh-config",
        sshd["config"],
        "--timeout",
        "3",
    )
    # an unreachable host is bad input (exit 2, one line naming it), after the inventory of what was reached
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        and "host pa-dead is unreachable" in proc.stderr
    )
    doc = json.loads(proc.stdout)  # one document: the inventory, the host under "offline"
    names = [n["name"] for n in doc["nodes"]]
    assert names[1:] == ["pa-local", "pa-dead"]
    assert doc["nodes"][1]["online"] is True
    assert doc["offline"][0]["name"] == "pa-dead"
