"""One small typed API over NVML (nvidia-ml-py's `pynvml`), used by the machine probe (`probe.py`, which
`detect` runs), the live sampler (`monitor/sampler.py`) and the launcher (`launch/runner.py`).

Like nvitop's `api/` under its `tui/`, this is the only module that talks to pynvml; callers get plain
values and typed records. Errors are NVML's own (`pynvml.NVMLError` and its subclasses, e.g.
NVMLError_NotSupported, NVMLError_NoPermission, NVMLError_GPUIsLost), caught where the reading they spoil
is optional, never a blind `except Exception`:
- `NVML.open()` raises `NVMLUnavailable` with the reason (no bindings installed, no library, no driver);
- `NVML.get(name, *args)` is an optional reading: the value, or `default` when this GPU, driver or
  binding version does not offer it;
- `count()`, `handle(i)` raise NVML's error: there is no GPU list to go on without them.

Standard library and pynvml only: `hardware/remote.py` sends this file's source, followed by probe.py's,
to machines where paradvisor is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class NVMLUnavailable(Exception):
    """NVML cannot be used on this machine; str() says why (one line)."""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _error_class(module):
    """The NVMLError class of `module` (pynvml, or a stand-in with the same function names)."""
    err = getattr(module, "NVMLError", None)
    if isinstance(err, type) and issubclass(err, BaseException):
        return err
    import pynvml

    return pynvml.NVMLError


@dataclass(frozen=True)
class GPUSample:
    """One GPU's live reading; a None field was not readable (`error`: NVML failed on this GPU)."""

    index: int
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    error: bool = False

    def to_doc(self) -> dict:
        doc = {
            "index": self.index,
            "util_pct": self.util_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
        }
        if self.error:
            doc["error"] = True
        return doc


@dataclass(frozen=True)
class HostSample:
    """One reading of a machine: CPU and RAM (psutil), and each GPU (NVML)."""

    time: float
    cpu_pct: float
    ram_used_bytes: int
    ram_total_bytes: int
    gpus: tuple[GPUSample, ...] = field(default_factory=tuple)

    def to_doc(self) -> dict:
        return {
            "time": self.time,
            "cpu_pct": self.cpu_pct,
            "ram_used_bytes": self.ram_used_bytes,
            "ram_total_bytes": self.ram_total_bytes,
            "gpus": [g.to_doc() for g in self.gpus],
        }


class NVML:
    """An open NVML session. `NVML.open()` starts it (or raises NVMLUnavailable); `close()` or a `with`
    block ends it. `module` replaces `import pynvml` (tests pass a scripted stand-in)."""

    def __init__(self, module):
        self.module = module
        self.Error = _error_class(module)
        self._handles: list | None = None

    @classmethod
    def open(cls, module=None) -> NVML:
        if module is None:
            try:
                import pynvml as module
            except ImportError:
                raise NVMLUnavailable("the NVML Python bindings (nvidia-ml-py) are not installed") from None
        nvml = cls(module)
        try:
            module.nvmlInit()
        except nvml.Error as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / NoPermission
            raise NVMLUnavailable(f"NVML could not start ({_text(exc) or type(exc).__name__})") from None
        return nvml

    def close(self) -> None:
        if self.module is None:
            return
        try:
            self.module.nvmlShutdown()
        except self.Error:  # already shut down, or the driver went away: nothing left to release
            pass
        self.module = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get(self, name: str, *args, default=None):
        """An optional reading: `pynvml.<name>(*args)`, or `default` when the binding lacks the function
        (older nvidia-ml-py) or NVML answers with an error (not supported on this GPU, no permission, GPU
        lost)."""
        fn = getattr(self.module, name, None)
        if fn is None:
            return default
        try:
            return fn(*args)
        except self.Error:
            return default

    def constant(self, name: str, default):
        return getattr(self.module, name, default)

    def count(self) -> int:
        return int(self.module.nvmlDeviceGetCount())

    def handles(self) -> list:
        """Every GPU's handle, index order (read once)."""
        if self._handles is None:
            self._handles = [self.module.nvmlDeviceGetHandleByIndex(i) for i in range(self.count())]
        return self._handles

    def handle(self, index: int):
        return self.handles()[index]

    def sample(self, index: int) -> GPUSample:
        """Utilisation and memory of GPU `index`; a GPU lost or reset mid-run gives an `error` sample."""
        h = self.handle(index)
        try:
            util = float(self.module.nvmlDeviceGetUtilizationRates(h).gpu)
            mem = self.module.nvmlDeviceGetMemoryInfo(h)
        except self.Error:
            return GPUSample(index=index, error=True)
        return GPUSample(
            index=index, util_pct=util, mem_used_bytes=int(mem.used), mem_total_bytes=int(mem.total)
        )

    def processes(self, index: int) -> list[tuple[int, int]]:
        """(pid, GPU memory bytes) of the compute processes on GPU `index`; empty where the GPU or driver
        keeps no per-process accounting."""
        procs = self.get("nvmlDeviceGetComputeRunningProcesses", self.handle(index), default=None) or ()
        return [(int(p.pid), int(p.usedGpuMemory or 0)) for p in procs]


def gpu_count(module=None) -> int:
    """How many GPUs NVML sees on this machine; 0 without NVML (no bindings, library or driver)."""
    try:
        nvml = NVML.open(module)
    except NVMLUnavailable:
        return 0
    with nvml:
        try:
            return nvml.count()
        except nvml.Error:  # NVML started but cannot list devices (e.g. no permission): no usable GPU
            return 0


def first_gpu(module=None) -> tuple[str, int] | None:
    """(name, total memory bytes) of this machine's first GPU, or None without NVML or a GPU."""
    try:
        nvml = NVML.open(module)
    except NVMLUnavailable:
        return None
    with nvml:
        try:
            if nvml.count() == 0:
                return None
            h = nvml.handle(0)
            return _text(nvml.module.nvmlDeviceGetName(h)), int(nvml.module.nvmlDeviceGetMemoryInfo(h).total)
        except nvml.Error:  # listed but unreadable (no permission, GPU lost): treated as no GPU
            return None
