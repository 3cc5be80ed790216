"""Sparse all-reduce on two real gloo processes: equals the dense reference; bytes are what was encoded."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from kilorl.comm import BucketedAllReduce, CompressionConfig, sparse_allreduce
from kilorl.comm import encoding as enc
from kilorl.comm.compressors import ThresholdTopK
from tests.comm.dist_helpers import run_workers

NUMEL = 50_003


def _local_sparse(rank: int, encoding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Different densities per rank, so the messages differ in size and padding is exercised."""
    g = torch.Generator().manual_seed(10 + rank)
    idx = torch.randperm(NUMEL, generator=g)[: int((0.02 + 0.25 * rank) * NUMEL)].sort().values
    values = torch.randn(idx.numel(), generator=g).bfloat16()
    return enc.encode(idx, values, NUMEL, encoding), torch.zeros(NUMEL).index_put_((idx,), values.float())


def _sparse_vs_dense(rank: int, world: int, encoding: str) -> dict:
    message, dense_local = _local_sparse(rank, encoding)
    sparse = sparse_allreduce(message, NUMEL)
    reference = dense_local.clone()
    dist.all_reduce(reference)
    reference /= world
    return {"sparse": sparse, "reference": reference}


def _both(rank: int, world: int) -> dict:
    """All scenarios in one pair of processes (spawning costs seconds)."""
    out = {enc_: _sparse_vs_dense(rank, world, enc_) for enc_ in ("auto", "varint", "bitmap", "coo32")}
    out["bytes"] = _bytes_as_reported(rank, world)
    return out


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return run_workers(_both, timeout=120)


def test_sparse_allreduce_equals_the_dense_average_on_two_gloo_ranks(runs):
    for encoding in ("auto", "varint", "bitmap", "coo32"):
        results = [r[encoding] for r in runs]
        for r in results:
            assert torch.allclose(r["sparse"], r["reference"], rtol=1e-6, atol=1e-7), encoding
        assert torch.equal(results[0]["sparse"], results[1]["sparse"])  # replicas stay identical
        assert (results[0]["sparse"] != 0).sum() > 0.25 * NUMEL  # the union of both ranks' positions


def _bytes_as_reported(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.zeros(20_000))
    cfg = CompressionConfig(method="threshold_topk", threshold=1e-4, topk_ratio=0.3 if rank == 0 else 0.1)
    sync = BucketedAllReduce([param], cfg)
    grad = torch.randn(20_000, generator=torch.Generator().manual_seed(rank))
    param.grad = grad.clone()
    stats = sync.synchronize()
    # the same selection made independently, encoded independently
    sel = ThresholdTopK(cfg).select(0, grad)
    mine = enc.encode(sel.indices, sel.values, 20_000).numel()
    sizes = [None] * world
    dist.all_gather_object(sizes, mine)
    return {"stats": stats.as_metrics(), "mine": mine, "sizes": sizes}


def test_reported_bytes_are_the_encoded_message_plus_padding_to_the_largest(runs):
    for r in (r["bytes"] for r in runs):
        s = r["stats"]
        assert s["comm_bytes_encoded"] == r["mine"]
        assert s["comm_bytes_sent"] == 8 + -(-max(r["sizes"]) // 8) * 8
        assert s["comm_bytes_dense"] == 4 * 20_000
        assert s["comm_ratio"] == s["comm_bytes_sent"] / s["comm_bytes_dense"] < 0.2
