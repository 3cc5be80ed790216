"""Communication hooks: one per compression method, usable by DDP and by :class:`BucketedAllReduce`.

A hook object holds the method's state (residuals, PowerSGD matrices, the step count) and
the per-update statistics; :func:`run_comm_hook` is the function DDP's
``register_comm_hook(state, hook)`` calls with it for every bucket. The same objects serve
the DDP-free path, which hands them duck-typed buckets, so both paths compress alike.

Byte accounting, per worker and per update: ``comm_bytes_dense`` is what a dense fp32
all-reduce of the same gradients would take from this worker (4 bytes per entry);
``comm_bytes_sent`` is what this worker actually handed to collectives (bf16: 2 bytes per
entry; PowerSGD: its P and Q factors plus the tensors it leaves uncompressed; threshold_topk:
the size word and the padded message). ``compress_s`` is time spent compressing and
decompressing on this worker, excluding waiting for the network.
"""

# No ``from __future__ import annotations``: DDP checks the hook's annotations as objects.

import logging
import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

from kilorl.comm.compressors import ThresholdTopK
from kilorl.comm.config import CompressionConfig
from kilorl.comm.encoding import encode
from kilorl.comm.sparse import launch_sparse_allreduce

log = logging.getLogger(__name__)


@dataclass
class CommStats:
    """Traffic and cost of one gradient update on one worker (see the module docstring)."""

    comm_bytes_dense: int = 0
    comm_bytes_sent: int = 0
    comm_bytes_encoded: int = 0
    """threshold_topk: the unpadded messages; the rest of ``comm_bytes_sent`` is padding and sizes."""
    compress_s: float = 0.0
    residual_norm: float = 0.0
    buckets: int = 0

    @property
    def comm_ratio(self) -> float:
        """Sent over dense: 1.0 for a dense all-reduce, 0.2 for five times fewer bytes."""
        return self.comm_bytes_sent / self.comm_bytes_dense if self.comm_bytes_dense else 0.0

    @classmethod
    def total(cls, parts: "list[CommStats]") -> "CommStats":
        """One report for several synchronisations (the minibatches of an update): bytes and
        seconds add up, the residual is the latest."""
        out = cls()
        for p in parts:
            out.comm_bytes_dense += p.comm_bytes_dense
            out.comm_bytes_sent += p.comm_bytes_sent
            out.comm_bytes_encoded += p.comm_bytes_encoded
            out.compress_s += p.compress_s
            out.buckets += p.buckets
            out.residual_norm = p.residual_norm
        return out

    def as_metrics(self) -> dict[str, float]:
        """The metric names the learners report per update."""
        out = {k: v for k, v in asdict(self).items() if k != "buckets"}
        out["comm_ratio"] = self.comm_ratio
        return out


class CommHook:
    """Base: counts updates (a bucket that ``is_last`` closes one) and collects statistics."""

    sequential = False
    """True when the hook launches collectives from future callbacks, so the DDP-free path
    must finish one bucket before starting the next (keeps every rank's collective order)."""

    def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
        self.process_group = process_group
        self.step = 0
        self._stats = CommStats()

    def communicate(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buffer = bucket.buffer()
        self._stats.comm_bytes_dense += 4 * buffer.numel()
        self._stats.buckets += 1
        fut = self._communicate(bucket, buffer)
        if bucket.is_last():
            self.step += 1
        return fut

    def _communicate(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> torch.futures.Future:
        raise NotImplementedError

    def residual_norm(self) -> float:
        return 0.0

    def pop_stats(self) -> CommStats:
        """Statistics since the last call (one update, when called once per update)."""
        stats, self._stats = self._stats, CommStats()
        stats.residual_norm = self.residual_norm()
        return stats

    def _dense(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> torch.futures.Future:
        self._stats.comm_bytes_sent += buffer.numel() * buffer.element_size()
        return default_hooks.allreduce_hook(self.process_group, bucket)


def run_comm_hook(state: CommHook, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The function registered with DDP: delegates to the hook object (DDP's ``state``)."""
    return state.communicate(bucket)


class DenseHook(CommHook):
    """Plain averaging all-reduce (what DDP does without a hook)."""

    def _communicate(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> torch.futures.Future:
        return self._dense(bucket, buffer)


class BF16Hook(CommHook):
    """torch's ``bf16_compress_hook``: cast to bfloat16, all-reduce, cast back."""

    def _communicate(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> torch.futures.Future:
        self._stats.comm_bytes_sent += 2 * buffer.numel()
        t0 = time.perf_counter()
        fut = default_hooks.bf16_compress_hook(self.process_group, bucket)
        self._stats.compress_s += time.perf_counter() - t0
        return fut


class PowerSGDHook(CommHook):
    """torch's ``powerSGD_hook`` with its own error feedback; dense for ``warmup_steps`` (>= 2).

    The hook launches its second and third all-reduce from future callbacks. On gloo, with
    several DDP buckets in flight, callbacks of different buckets then issue collectives in
    a different order on different ranks and the job hangs (seen here on 2 ranks); so off
    nccl each bucket finishes inside the hook (correct, without overlap for this method)."""

    sequential = True

    def __init__(self, cfg: CompressionConfig, process_group: dist.ProcessGroup | None = None) -> None:
        super().__init__(process_group)
        self.state = PowerSGDState(
            process_group=process_group,
            matrix_approximation_rank=cfg.powersgd_rank,
            start_powerSGD_iter=max(2, cfg.warmup_steps),
            use_error_feedback=cfg.error_feedback,
            warm_start=cfg.error_feedback,
            min_compression_rate=2,
        )

    def _communicate(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> torch.futures.Future:
        before = self.state.total_numel_after_compression
        t0 = time.perf_counter()
        fut = powerSGD_hook(self.state, bucket)
        self._stats.compress_s += time.perf_counter() - t0  # the hook body; its callbacks are not timed
        if dist.get_backend(self.process_group) != "nccl":
            done: torch.futures.Future = torch.futures.Future()
            done.set_result(fut.wait())
            fut = done
        numel = self.state.total_numel_after_compression - before or buffer.numel()  # 0: still dense
        self._stats.comm_bytes_sent += numel * buffer.element_size()
        return fut

    def residual_norm(self) -> float:
        errors = self.state.error_dict.values()
        return math.sqrt(sum(float(e.double().pow(2).sum()) for e in errors)) if errors else 0.0


class ThresholdTopKHook(CommHook):
    """Threshold + top-k with error feedback, encoded (see ``encoding``) and all-gathered."""

    def __init__(self, cfg: CompressionConfig, process_group: dist.ProcessGroup | None = None, min_dense_steps: int = 0) -> None:
        super().__init__(process_group)
        self.compressor = ThresholdTopK(cfg)
        self.index_encoding = cfg.index_encoding
        self.dense_steps = max(cfg.warmup_steps, min_dense_steps)

    def _communicate(self, bucket: dist.GradBucket, buffer: torch.Tensor) -> torch.futures.Future:
        if self.step < self.dense_steps:
            return self._dense(bucket, buffer)
        t0 = time.perf_counter()
        selection = self.compressor.select(bucket.index(), buffer)
        message = encode(selection.indices, selection.values, buffer.numel(), self.index_encoding)
        self._stats.compress_s += time.perf_counter() - t0
        op = launch_sparse_allreduce(message, buffer.numel(), self.process_group, on_decoded=self._add_compress_s)
        self._stats.comm_bytes_encoded += message.numel()
        self._stats.comm_bytes_sent += op.bytes_sent
        dtype = buffer.dtype
        return op.future if dtype == torch.float32 else op.future.then(lambda f: f.value().to(dtype))

    def _add_compress_s(self, seconds: float) -> None:
        self._stats.compress_s += seconds

    def residual_norm(self) -> float:
        return self.compressor.residual_norm()


def make_comm_hook(
    cfg: CompressionConfig | None, process_group: dist.ProcessGroup | None = None, *, under_ddp: bool = False
) -> CommHook:
    """The hook object for ``cfg.method``. ``under_ddp``: keep the first update dense, because
    DDP rebuilds its buckets after it and per-bucket residuals would not line up."""
    cfg = cfg or CompressionConfig()
    if cfg.method == "none":
        return DenseHook(process_group)
    if cfg.method == "bf16":
        return BF16Hook(process_group)
    if cfg.method == "powersgd":
        return PowerSGDHook(cfg, process_group)
    if cfg.method == "threshold_topk":
        return ThresholdTopKHook(cfg, process_group, min_dense_steps=1 if under_ddp else 0)
    raise ValueError(f"compression.method={cfg.method!r} has no hook")
