"""Live device readings: GPU utilisation and memory through NVML, CPU and RAM through psutil.

NVML is opened once; a GPU that disappears or an NVML error mid-run marks that reading missing and
the sampler carries on (it never raises). `SamplerThread` runs it at an interval in the background.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from paradvisor.hardware.nvml import NVML, HostSample, NVMLUnavailable
from paradvisor.rundir import SAMPLES
from paradvisor.rundir import rank_process as _rank_process
from paradvisor.safeio import append_private


class Sampler:
    """Readings of this machine: `read()` a typed HostSample, `sample()` its JSON document."""

    def __init__(self):
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(None)  # prime: the next call measures since now
        self.nvml: NVML | None = None
        self.handles: list = []
        self.errors = 0
        try:
            self.nvml = NVML.open()
        except NVMLUnavailable:  # no bindings, library or driver: CPU only
            return
        try:
            self.handles = self.nvml.handles()
        except self.nvml.Error:  # NVML started but cannot list the GPUs: CPU only
            self.close()

    def read(self) -> HostSample:
        vm = self._psutil.virtual_memory()
        gpus = tuple(self.nvml.sample(i) for i in range(len(self.handles))) if self.nvml is not None else ()
        self.errors += sum(g.error for g in gpus)  # GPU lost, reset, or NVML hiccup: that reading is missing
        return HostSample(
            time=time.time(),
            cpu_pct=self._psutil.cpu_percent(None),
            ram_used_bytes=int(vm.used),
            ram_total_bytes=int(vm.total),
            gpus=gpus,
        )

    def sample(self) -> dict:
        return self.read().to_doc()

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
            self.handles = []


class SamplerThread(threading.Thread):
    """Calls `callback(sample)` every `interval` seconds until `stop()`. With `ranks_of` (a callable giving
    (run directory, world size) or None), each sample also carries `ranks`: RankSampler's readings."""

    def __init__(self, callback: Callable[[dict], None], interval: float = 1.0, ranks_of=None):
        super().__init__(daemon=True, name="paradvisor-sampler")
        self.callback, self.interval, self.ranks_of = callback, interval, ranks_of
        self._stop_event = threading.Event()

    def run(self) -> None:
        sampler = Sampler()
        ranks = None
        try:
            while not self._stop_event.is_set():
                s = sampler.sample()
                target = self.ranks_of() if self.ranks_of is not None else None
                if target is not None:
                    if ranks is None or str(ranks.run_dir) != str(target[0]):
                        ranks = RankSampler(target[0])
                    s["ranks"] = ranks.sample(target[1], s["gpus"], sampler.nvml, sampler.handles)
                self.callback(s)
                self._stop_event.wait(self.interval)
        finally:
            sampler.close()

    def stop(self) -> None:
        self._stop_event.set()


SAMPLES_FILE = (
    SAMPLES  # samples.jsonl, one reading per line: {"kind": "sample", "node", "host", "time", "cpu_pct", ...}
)
SAMPLE_INTERVAL_S = 2.0


class SampleLog:
    """A node's own readings, appended to the run directory's samples.jsonl (one `write` per line, like the
    metrics) every `interval` seconds while its launcher waits for the run: the ssh engine carries them back to
    the launching machine like the metrics, so `monitor` and the TUI show every node's GPU/CPU load."""

    def __init__(self, run_dir, node: int, interval: float = SAMPLE_INTERVAL_S):
        self.path = os.path.join(str(run_dir), SAMPLES_FILE)
        self.node, self.host, self.interval = node, socket.gethostname(), interval
        self.sampler: Sampler | None = None
        self.next = 0.0

    def tick(self) -> None:
        """Write a reading if one is due; never raises (a reading is information, not the run)."""
        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + self.interval
        try:
            if self.sampler is None:
                self.sampler = Sampler()
            rec = {"kind": "sample", "node": self.node, "host": self.host, **self.sampler.sample()}
            append_private(self.path, (json.dumps(rec) + "\n").encode())
        except Exception:  # noqa: BLE001 (a full disk or a lost GPU must not stop the run's watcher)
            pass

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None


class RankSampler:
    """Readings of one run's rank processes on this machine, found through their rank-N.pid files: CPU %
    and resident memory (psutil), and the GPU memory each uses (NVML's per-process accounting). Ranks on
    other nodes, and ranks that are gone, have no reading. Never raises."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.procs: dict[int, object] = {}

    def sample(self, world: int, gpus: list | None = None, nvml=None, handles=()) -> dict[int, dict]:
        out: dict[int, dict] = {}
        gpu_of: dict[int, tuple[int, int]] = {}
        for i in range(len(handles) if nvml is not None else 0):
            for pid, used in nvml.processes(i):  # empty without per-process accounting on this GPU / driver
                gpu_of[pid] = (i, used)
        for rank in range(min(world, 1024)):
            proc = self.procs.get(rank)
            try:
                if proc is None or not proc.is_running():
                    proc = _rank_process(self.run_dir, rank)
                    if proc is None:
                        continue
                    self.procs[rank] = proc
                    proc.cpu_percent(None)  # primes: the next reading measures since now
                    out[rank] = {"cpu_pct": None, "rss_bytes": proc.memory_info().rss}
                else:
                    out[rank] = {"cpu_pct": proc.cpu_percent(None), "rss_bytes": proc.memory_info().rss}
            except Exception:  # gone between the check and the reading
                self.procs.pop(rank, None)
                continue
            if proc.pid in gpu_of:
                idx, used = gpu_of[proc.pid]
                out[rank].update(gpu_index=idx, gpu_mem_bytes=used)
                util = next((g.get("util_pct") for g in gpus or () if g.get("index") == idx), None)
                out[rank]["gpu_util_pct"] = util
        return out
