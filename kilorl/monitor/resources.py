"""What a role process uses: host RSS, device memory and GPU utilisation.

Device readings are only taken where they are real: torch's CUDA counters when torch
is already imported by the role and CUDA is initialised (the monitor never imports
torch itself, nor starts a CUDA context), and NVML when ``pynvml`` loads and finds a
driver. On a CPU-only machine those readings are empty, so their series are absent
rather than zeros that would look like an idle GPU.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import psutil


@dataclass
class DeviceReading:
    """One device as seen from one process; ``None`` where the source is unavailable."""

    device: str
    allocated_bytes: float | None = None
    reserved_bytes: float | None = None
    process_bytes: float | None = None
    utilization_ratio: float | None = None
    free_bytes: float | None = None


@dataclass
class ResourceReading:
    rss_bytes: float
    host_available_bytes: float
    devices: list[DeviceReading] = field(default_factory=list)


class _Nvml:
    """Lazy, optional NVML: ``ok`` is False when the library or a driver is missing."""

    def __init__(self) -> None:
        self.ok = False
        self._nv = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv = pynvml
            self.ok = True
        except Exception:  # no library, no driver, no device: NVML series stay absent
            self.ok = False

    def read(self, pid: int) -> dict[int, tuple[float | None, float | None, float | None]]:
        """Per device index: (utilisation 0-1, bytes used by ``pid``, free bytes)."""
        nv = self._nv
        out: dict[int, tuple[float | None, float | None, float | None]] = {}
        if nv is None:
            return out
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
            free = float(nv.nvmlDeviceGetMemoryInfo(h).free)
            used = None
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
                mine = [p.usedGpuMemory for p in procs if p.pid == pid and p.usedGpuMemory is not None]
                used = float(sum(mine)) if mine else None
            except Exception:  # some drivers refuse per-process queries in containers
                used = None
            out[i] = (util, used, free)
        return out


class ResourceSampler:
    """Reads this process's resources; cheap enough to call once per report."""

    def __init__(self, pid: int | None = None, use_nvml: bool = True) -> None:
        self.pid = pid or os.getpid()
        self._proc = psutil.Process(self.pid)
        self._nvml: _Nvml | None = _Nvml() if use_nvml else None

    def read(self) -> ResourceReading:
        reading = ResourceReading(
            rss_bytes=float(self._proc.memory_info().rss),
            host_available_bytes=float(psutil.virtual_memory().available),
        )
        devices: dict[str, DeviceReading] = {}
        for idx, alloc, reserved, free in _torch_cuda_readings():
            devices[str(idx)] = DeviceReading(str(idx), alloc, reserved, free_bytes=free)
        if self._nvml is not None and self._nvml.ok:
            for idx, (util, used, free) in self._nvml.read(self.pid).items():
                d = devices.setdefault(str(idx), DeviceReading(str(idx)))
                d.utilization_ratio, d.process_bytes = util, used
                d.free_bytes = d.free_bytes if d.free_bytes is not None else free
            # Only the devices this process touches: torch's view, or NVML's process list.
            devices = {k: d for k, d in devices.items() if d.allocated_bytes is not None or d.process_bytes is not None}
        reading.devices = list(devices.values())
        return reading


def _torch_cuda_readings() -> list[tuple[int, float, float, float | None]]:
    """(device, allocated, reserved, free) for each CUDA device torch has initialised here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    cuda = torch.cuda
    if not (cuda.is_available() and cuda.is_initialized()):
        return []
    out = []
    for i in range(cuda.device_count()):
        reserved = float(cuda.memory_reserved(i))
        if reserved == 0.0:
            continue
        free = None
        try:
            free = float(cuda.mem_get_info(i)[0])
        except Exception:  # mem_get_info needs a context on that device
            free = None
        out.append((i, float(cuda.memory_allocated(i)), reserved, free))
    return out
