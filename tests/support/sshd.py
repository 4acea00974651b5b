"""A real OpenSSH server for tests, started on loopback addresses only (127.0.0.1, 127.0.0.2, ...), with a
throw-away host key and client key: the ssh probe tests and the ssh launch tests use it (no fake ssh)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def need_sshd() -> None:
    if SSHD is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        if os.environ.get("CI"):
            pytest.fail("sshd/ssh not installed: scripts/install.sh --dev installs openssh-server")
        pytest.skip("openssh-server not installed")


class Sshd:
    """sshd listening on `addresses` (loopback only) at one port; `config` is an ssh client config whose
    `Host` entries cover those addresses and `aliases` ({alias: (address, port)})."""

    def __init__(
        self,
        d: Path,
        addresses: tuple[str, ...] = ("127.0.0.1",),
        *,
        aliases: dict | None = None,
        accept_env: tuple[str, ...] = (),
    ):
        need_sshd()
        assert all(a.startswith("127.") for a in addresses), "tests use loopback addresses only"
        os.chmod(d, 0o700)
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        os.chmod(d / "authorized_keys", 0o600)
        self.port = free_port()
        listen = "".join(f"ListenAddress {a}:{self.port}\n" for a in addresses)
        (d / "sshd_config").write_text(
            f"{listen}HostKey {d / 'host_key'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            f"PubkeyAuthentication yes\nUsePAM no\nStrictModes no\nPidFile {d / 'sshd.pid'}\n"
            "PermitRootLogin yes\nLogLevel ERROR\nMaxStartups 100\nMaxSessions 100\n"
            + (f"AcceptEnv {' '.join(accept_env)}\n" if accept_env else "")
        )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE)
        for a in addresses:
            for _ in range(100):
                try:
                    socket.create_connection((a, self.port), timeout=0.2).close()
                    break
                except OSError:
                    if self.proc.poll() is not None:
                        pytest.fail(f"sshd did not start: {self.proc.stderr.read().decode()}")
                    time.sleep(0.1)
        # a port no one answers on for as long as this server lives: bound here and never listened on, so a
        # connection is refused and no other process (another worker's sshd) can take it meanwhile, as one
        # did to a port that was only free when chosen ("Permission denied (publickey)" in place of refused)
        self._dead = socket.socket()
        self._dead.bind(("127.0.0.1", 0))
        self.dead_port = self._dead.getsockname()[1]
        self.common = (
            f"  User {getpass.getuser()}\n  IdentityFile {d / 'client_key'}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n"
        )
        self.config = d / "ssh_config"
        text = "".join(
            f"Host {alias}\n  HostName {addr}\n  Port {port}\n{self.common}"
            for alias, (addr, port) in (aliases or {}).items()
        )
        self.config.write_text(text + f"Host 127.*\n{self.common}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._dead.close()
