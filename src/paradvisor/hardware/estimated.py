"""Entries for GPUs that neither the catalogue nor the user defines, estimated from what NVML reports.

An NVML name the catalogue does not know gets an entry estimated from NVML's figures: memory, SM
count (or CUDA cores), maximum SM and memory clocks and memory bus width, with the per-SM tensor
rate of its compute capability (see `TENSOR_FLOPS_PER_SM_CLOCK`; halved for GeForce boards, whose
FP32-accumulate tensor rate is half), or, without SM count and clock, the rates of the catalogue GPU
of the same compute capability. It is marked `estimated` and its source says how it was made.
"""

from __future__ import annotations

from paradvisor.hardware import catalog
from paradvisor.hardware.types import GPUSpec

# Dense 16-bit tensor FLOPs per SM per clock, by compute capability (major, minor): from each
# architecture's whitepaper, e.g. A100 312 TFLOPS = 108 SMs x 1.41 GHz x 2048; H100 SXM 989.4 =
# 132 x 1.83 GHz x 4096. GeForce/pro boards of a generation share the per-SM rate of its GA10x/AD10x
# whitepaper table (FP32 accumulate on pro boards).
TENSOR_FLOPS_PER_SM_CLOCK = {
    (7, 0): 1024,
    (7, 2): 1024,
    (7, 5): 1024,
    (8, 0): 2048,
    (8, 6): 1024,
    (8, 7): 1024,
    (8, 9): 1024,
    (9, 0): 4096,
    (10, 0): 8192,
    (10, 3): 8192,
    (12, 0): 1024,
}
CUDA_CORES_PER_SM = {6: 128, 7: 64, 8: 128, 9: 128, 10: 128, 12: 128}  # (8, 0): 64, below


def estimated_spec(
    name: str,
    *,
    memory_bytes: int | None,
    compute_capability: str | None,
    sm_count: int | None = None,
    cuda_cores: int | None = None,
    sm_clock_mhz: float | None = None,
    mem_clock_mhz: float | None = None,
    bus_width_bits: int | None = None,
) -> GPUSpec | None:
    """A usable entry from what NVML reports about a GPU the catalogue lacks, or None if too little is known
    (no memory size, or neither SM count nor cores with a clock)."""
    if not memory_bytes or not compute_capability:
        return None
    try:
        major, minor = (int(x) for x in compute_capability.split(".")[:2])
    except ValueError:
        return None
    per_sm_cores = 64 if (major, minor) == (8, 0) else CUDA_CORES_PER_SM.get(major)
    if not sm_count and cuda_cores and per_sm_cores:
        sm_count = cuda_cores // per_sm_cores
    cores = cuda_cores or (sm_count * per_sm_cores if sm_count and per_sm_cores else None)
    basis = []
    tflops: dict[str, float] = {}
    if sm_count and sm_clock_mhz and cores:
        ghz = sm_clock_mhz / 1e3
        tflops["fp32"] = round(cores * 2 * ghz / 1e3, 1)
        per_sm = TENSOR_FLOPS_PER_SM_CLOCK.get((major, minor))
        if per_sm:
            # GeForce boards run FP16/BF16 with FP32 accumulate (what training uses) at half the rate
            geforce = "geforce" in name.lower()
            half = round(sm_count * per_sm * ghz / 1e3 / (2 if geforce else 1), 1)
            tflops["fp16"] = half
            if major >= 8:
                tflops["bf16"] = half
                tflops["tf32"] = round(half / 2, 1)
            if (major, minor) >= (8, 9):
                tflops["fp8"] = round(2 * half, 1)
        basis.append(f"{sm_count} SMs at {sm_clock_mhz:.0f} MHz, compute capability {compute_capability}")
    else:
        # No SM count or clock: borrow the rates of the catalogue GPU of the same compute capability
        # whose memory is closest.
        same = [
            s
            for s in catalog.gpus().values()
            if s.compute_capability == compute_capability and not s.mig_of and s.origin == "catalog"
        ]
        if not same:
            return None
        like = min(same, key=lambda s: abs(s.memory_bytes - memory_bytes))
        tflops = dict(like.tflops)
        basis.append(f"rates of the catalogue's {like.name} (same compute capability {compute_capability})")
    if mem_clock_mhz and bus_width_bits:
        bw = mem_clock_mhz * 1e6 * 2 * bus_width_bits / 8  # double data rate
        basis.append(f"{bus_width_bits}-bit memory at {mem_clock_mhz:.0f} MHz")
    else:
        bw = 500e9
        basis.append("memory bandwidth unknown, 500 GB/s assumed")
    link = "pcie5" if major >= 9 else "pcie4" if major >= 8 else "pcie3"
    return GPUSpec(
        name=name,
        vendor="nvidia",
        arch=f"sm_{major}{minor}",
        memory_bytes=int(memory_bytes),
        mem_bw=bw,
        tflops=tflops,
        intra_link=link,
        compute_capability=compute_capability,
        nvml_names=(name,),
        origin="estimated",
        source="estimated from NVML: " + "; ".join(basis),
    )
