"""A real one-node Slurm for tests: munged, slurmctld and slurmd (Debian packages `munge` and `slurm-wlm`,
installed by scripts/install.sh --dev) started as root from a slurm.conf written here: this machine as the
only node (127.0.0.1), private state, spool, munge key and socket under a temporary folder, free ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.sshd import free_port

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None
    )


class Slurm:
    def __init__(self, d: Path):
        missing = [b for b in BINARIES if _which(b) is None]
        if missing or os.geteuid() != 0:
            why = (
                f"Slurm binaries missing: {', '.join(missing)} (apt: slurm-wlm munge)"
                if missing
                else "slurmd runs as root here"
            )
            if os.environ.get("CI"):
                pytest.fail(f"{why}: scripts/install.sh --dev installs them")
            pytest.skip(why)
        self.dir = d
        os.chmod(d, 0o711)  # munged wants its socket's folders searchable by every user
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(mode=0o711 if sub == "munge" else 0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.procs: list[subprocess.Popen] = []
        sock = d / "munge" / "munge.socket"
        self._start(
            [
                _which("munged"),
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={sock}",
                f"--pid-file={d}/munged.pid",
                f"--log-file={d}/munged.log",
                f"--seed-file={d}/munge/seed",
            ]
        )
        self._until(lambda: sock.exists(), 15, "munged's socket")
        self.host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 2
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""ClusterName=paradvisortest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
KillWait=10
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._start([_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._start([_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.host])
        self._until(lambda: "idle" in self.run("sinfo", "-h", "-o", "%T").stdout, 60, "an idle Slurm node")

    def _start(self, argv: list[str]) -> None:
        log = open(self.dir / f"{Path(argv[0]).name}.stderr", "wb")  # noqa: SIM115 (the daemon's lifetime)
        self.procs.append(
            subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SLURM_CONF": str(self.dir / "slurm.conf")},
            )
        )

    def _until(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                logs = "\n".join(f.read_text()[-1500:] for f in self.dir.glob("*.stderr"))
                pytest.fail(f"{', '.join(dead)} stopped while waiting for {what}:\n{logs}")
            time.sleep(0.3)
        pytest.fail(f"no {what} within {timeout} s")

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, timeout=60, check=False
        )

    def state(self, job_id: str) -> str:
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")

    def stop(self) -> None:
        self.run("scancel", "--user", "root")
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
