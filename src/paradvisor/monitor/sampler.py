"""Live device readings: GPU utilisation and memory through NVML, CPU and RAM through psutil.

NVML is opened once; a GPU that disappears or an NVML error mid-run marks that reading missing and
the sampler carries on (it never raises). `SamplerThread` runs it at an interval in the background.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Sampler:
    def __init__(self):
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(None)  # prime: the next call measures since now
        self.nvml = None
        self.handles: list = []
        self.errors = 0
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no driver / no library: CPU only
            self.nvml = None

    def sample(self) -> dict:
        vm = self._psutil.virtual_memory()
        out = {"time": time.time(), "cpu_pct": self._psutil.cpu_percent(None), "ram_used_bytes": int(vm.used),
               "ram_total_bytes": int(vm.total), "gpus": []}
        for i, h in enumerate(self.handles):
            g = {"index": i, "util_pct": None, "mem_used_bytes": None, "mem_total_bytes": None}
            try:
                g["util_pct"] = float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu)
                mem = self.nvml.nvmlDeviceGetMemoryInfo(h)
                g["mem_used_bytes"], g["mem_total_bytes"] = int(mem.used), int(mem.total)
            except Exception:  # GPU lost, reset, or NVML hiccup: keep going without this reading
                self.errors += 1
                g["error"] = True
            out["gpus"].append(g)
        return out

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
            self.nvml = None


class SamplerThread(threading.Thread):
    """Calls `callback(sample)` every `interval` seconds until `stop()`."""

    def __init__(self, callback: Callable[[dict], None], interval: float = 1.0):
        super().__init__(daemon=True, name="paradvisor-sampler")
        self.callback, self.interval = callback, interval
        self._stop_event = threading.Event()

    def run(self) -> None:
        sampler = Sampler()
        try:
            while not self._stop_event.is_set():
                self.callback(sampler.sample())
                self._stop_event.wait(self.interval)
        finally:
            sampler.close()

    def stop(self) -> None:
        self._stop_event.set()


SAMPLES_FILE = "samples.jsonl"  # one reading per line: {"kind": "sample", "node", "host", "time", "cpu_pct", ...}
SAMPLE_INTERVAL_S = 2.0


class SampleLog:
    """A node's own readings, appended to the run directory's samples.jsonl (one `write` per line, like the
    metrics) every `interval` seconds while its launcher waits for the run: the ssh engine carries them back to
    the launching machine like the metrics, so `monitor` and the TUI show every node's GPU/CPU load."""

    def __init__(self, run_dir, node: int, interval: float = SAMPLE_INTERVAL_S):
        import os
        import socket

        self.path = os.path.join(str(run_dir), SAMPLES_FILE)
        self.node, self.host, self.interval = node, socket.gethostname(), interval
        self.sampler: Sampler | None = None
        self.next = 0.0

    def tick(self) -> None:
        """Write a reading if one is due; never raises (a reading is information, not the run)."""
        import json
        import os

        now = time.monotonic()
        if now < self.next:
            return
        self.next = now + self.interval
        try:
            if self.sampler is None:
                self.sampler = Sampler()
            rec = {"kind": "sample", "node": self.node, "host": self.host, **self.sampler.sample()}
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, (json.dumps(rec) + "\n").encode())
            finally:
                os.close(fd)
        except Exception:  # noqa: BLE001 (a full disk or a lost GPU must not stop the run's watcher)
            pass

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
