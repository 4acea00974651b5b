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
