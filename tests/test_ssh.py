"""The ssh probe against a real sshd started on 127.0.0.1 by this test (no fake)."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from paradvisor.hardware.remote import probe_hosts

pytestmark = pytest.mark.ssh

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if SSHD is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        if os.environ.get("CI"):
            pytest.fail("sshd/ssh not installed: .ci/run installs openssh-server")
        pytest.skip("openssh-server not installed")
    d = tmp_path_factory.mktemp("sshd")
    os.chmod(d, 0o700)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPidFile {d / 'sshd.pid'}\n"
        "PermitRootLogin yes\nLogLevel ERROR\n")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"sshd did not start: {proc.stderr.read().decode()}")
            time.sleep(0.1)
    dead_port = _free_port()
    cfg = d / "ssh_config"
    common = (f"  User {getpass.getuser()}\n  IdentityFile {d / 'client_key'}\n  IdentitiesOnly yes\n"
              "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n")
    cfg.write_text(f"Host pa-local\n  HostName 127.0.0.1\n  Port {port}\n{common}"
                   f"Host pa-dead\n  HostName 127.0.0.1\n  Port {dead_port}\n{common}")
    yield {"config": str(cfg), "port": port}
    proc.terminate()
    proc.wait(timeout=10)


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
    cfg.write_text(f"Host pa-nokey\n  HostName 127.0.0.1\n  Port {sshd['port']}\n  User nobody-here\n"
                   "  IdentitiesOnly yes\n  IdentityFile /nonexistent\n  UserKnownHostsFile /dev/null\n"
                   "  StrictHostKeyChecking no\n  LogLevel ERROR\n")
    [node] = probe_hosts(["pa-nokey"], ssh_config=str(cfg), timeout=5)
    assert not node.online
    assert "denied" in node.reason.lower() or "permission" in node.reason.lower()


def test_detect_cli_with_hosts(cli, sshd):
    proc = cli("detect", "--json", "--host", "pa-local", "--host", "pa-dead", "--ssh-config", sshd["config"],
               "--timeout", "3")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    names = [n["name"] for n in doc["nodes"]]
    assert names[1:] == ["pa-local", "pa-dead"]
    assert doc["nodes"][1]["online"] is True
    assert doc["offline"][0]["name"] == "pa-dead"
