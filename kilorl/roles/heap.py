"""A role process keeps the heap memory it frees, instead of handing it back to the kernel.

A CPU learner's update allocates and frees the same tensors again and again: a CartPole
epoch makes dozens of 128 KiB activations and gradients (512 x 64 float32). glibc serves a
block of 128 KiB or more with ``mmap`` until its threshold adapts, and trims the top of its
heap as soon as more than twice that threshold is free. So after every update the freed
activations go back to the kernel, and the next update faults them in again, page by page:
400-700 minor page faults per update in ``benchmarks/learner_step_bench.py``'s update.
A fault costs far more in a VM whose memory the host backs lazily than on bare metal.

``retain_freed_memory(limit_mb)`` sets glibc's ``M_MMAP_THRESHOLD`` to 32 MiB (the ceiling of
its own adaptive threshold: larger blocks still get their own mapping and go back when freed)
and ``M_TRIM_THRESHOLD`` to ``limit_mb``, so up to that much freed memory stays in the
process for the next update. This is what PyTorch's CPU tuning guide gets from jemalloc or
tcmalloc through ``LD_PRELOAD``; two ``mallopt`` calls need no preloaded library and reach Ray
workers that were started before the run's environment was known.

Measured on the 2-core development VM (``docs/benchmarks.md``, "The driver leaves the cores
to the roles"): the update's page faults fell from 400-700 to under 10 per update alone, and
from 1,240 to 150 per second in a training learner; a CartPole run of 40,960 env steps went
from a median of 7.8K to 8.7K env steps/s (5 alternating pairs, ``train.retain_freed_memory_mb``
0 against 256).

Other C libraries (musl, macOS) have no such knobs; there the call does nothing and says so.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
"""Blocks of this size or more keep their own mapping (glibc's adaptive ceiling on 64-bit)."""


def retain_freed_memory(limit_mb: int) -> bool:
    """Keep up to ``limit_mb`` MiB of freed heap in this process; 0 leaves the allocator as it is.

    Returns whether glibc took both settings (False on other C libraries, or with 0).
    """
    if limit_mb < 0:
        raise ValueError(f"retain_freed_memory: limit_mb must be >= 0, got {limit_mb}")
    if limit_mb == 0 or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    trim = min(limit_mb << 20, 2**31 - 1)
    return bool(mallopt(M_MMAP_THRESHOLD, min(MMAP_THRESHOLD_BYTES, trim))) and bool(mallopt(M_TRIM_THRESHOLD, trim))
