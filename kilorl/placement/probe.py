"""Bandwidth probes: host memcpy (numpy) and, on NVIDIA GPUs, device and peer copies.

The GPU probes call the CUDA driver API (``libcuda``) through ctypes so the cluster layer
needs neither torch nor a CUDA toolkit; on a machine without the driver they report why
they were skipped instead of pretending.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from typing import Any

import numpy as np


def host_memcpy_gbps(nbytes: int = 64 << 20, repeats: int = 5) -> dict[str, Any]:
    """Median GB/s of ``np.copyto`` between two ``nbytes`` buffers (read + write counted once)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in before timing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"bytes": nbytes, "repeats": repeats, "median_gbps": round(nbytes / med / 1e9, 2),
            "best_gbps": round(nbytes / min(times) / 1e9, 2)}


class CudaError(RuntimeError):
    pass


class _Driver:
    """The few CUDA driver calls the probes need."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as err:
            raise CudaError(f"CUDA driver library not found ({err})") from None
        self.call("cuInit", ctypes.c_uint(0))

    def call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(msg))
            raise CudaError(f"{name} failed: {rc} {msg.value.decode() if msg.value else ''}")

    def count(self) -> int:
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def context(self, ordinal: int) -> ctypes.c_void_p:
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        self.call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(ordinal))
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        return ctx

    def alloc(self, nbytes: int) -> ctypes.c_uint64:
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return ptr

    def timed(self, fn, nbytes: int, repeats: int) -> float:
        fn()
        self.call("cuCtxSynchronize")
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            self.call("cuCtxSynchronize")
            times.append(time.perf_counter() - t0)
        return round(nbytes / statistics.median(times) / 1e9, 2)


def gpu_copy_gbps(nbytes: int = 256 << 20, repeats: int = 5) -> dict[str, Any]:
    """Per device: host->device, device->host (pinned), device->device; per pair: peer copy."""
    try:
        drv = _Driver()
        n = drv.count()
    except CudaError as err:
        return {"status": f"skipped: {err}"}
    if n == 0:
        return {"status": "skipped: no GPU found"}
    out: dict[str, Any] = {"status": "ok", "bytes": nbytes, "devices": [], "peer": []}
    host = ctypes.c_void_p()
    bufs: dict[int, tuple[ctypes.c_uint64, ctypes.c_uint64]] = {}
    ctxs = {i: drv.context(i) for i in range(n)}
    size = ctypes.c_size_t(nbytes)
    try:
        drv.call("cuCtxSetCurrent", ctxs[0])
        drv.call("cuMemAllocHost_v2", ctypes.byref(host), size)
        for i in range(n):
            drv.call("cuCtxSetCurrent", ctxs[i])
            a, b = drv.alloc(nbytes), drv.alloc(nbytes)
            bufs[i] = (a, b)
            out["devices"].append({
                "index": i,
                "h2d_gbps": drv.timed(lambda a=a: drv.call("cuMemcpyHtoD_v2", a, host, size), nbytes, repeats),
                "d2h_gbps": drv.timed(lambda a=a: drv.call("cuMemcpyDtoH_v2", host, a, size), nbytes, repeats),
                # A device-to-device copy reads and writes: count both directions.
                "d2d_gbps": 2 * drv.timed(lambda a=a, b=b: drv.call("cuMemcpyDtoD_v2", b, a, size), nbytes, repeats),
            })
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                can = ctypes.c_int()
                di, dj = ctypes.c_int(), ctypes.c_int()
                drv.call("cuDeviceGet", ctypes.byref(di), ctypes.c_int(i))
                drv.call("cuDeviceGet", ctypes.byref(dj), ctypes.c_int(j))
                drv.call("cuDeviceCanAccessPeer", ctypes.byref(can), di, dj)
                drv.call("cuCtxSetCurrent", ctxs[i])
                if can.value:
                    try:
                        drv.call("cuCtxEnablePeerAccess", ctxs[j], ctypes.c_uint(0))
                    except CudaError as err:
                        if "ALREADY" not in str(err).upper():
                            raise
                src, dst = bufs[i][0], bufs[j][1]
                def copy(src=src, dst=dst, i=i, j=j) -> None:
                    drv.call("cuMemcpyPeer", dst, ctxs[j], src, ctxs[i], size)

                gbps = drv.timed(copy, nbytes, repeats)
                out["peer"].append({"src": i, "dst": j, "p2p_access": bool(can.value), "gbps": gbps})
        if n == 1:
            out["peer_status"] = "skipped: one GPU, no peer to copy to"
    except CudaError as err:
        out["status"] = f"error: {err}"
    finally:
        for i, (a, b) in bufs.items():
            drv.call("cuCtxSetCurrent", ctxs[i])
            drv.lib.cuMemFree_v2(a)
            drv.lib.cuMemFree_v2(b)
        if host.value:
            drv.lib.cuMemFreeHost(host)
        for i in ctxs:
            dev = ctypes.c_int()
            drv.lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(i))
            drv.lib.cuDevicePrimaryCtxRelease_v2(dev)
    return out
