"""BucketedAllReduce and DistributedModel: bucketing and misuse, in one process (the 2-rank checks are in test_ddp)."""

from __future__ import annotations

import pytest
import torch

from kilorl.comm import BucketedAllReduce, DistributedModel
from kilorl.comm.sync import FlatBucket, bucket_parameters


def _params(*sizes: int) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(n)) for n in sizes]


def test_buckets_take_parameters_last_first_up_to_the_cap():
    params = _params(100, 200, 300, 50, 2000)
    buckets = bucket_parameters(params, cap_bytes=4 * 400)
    assert [[p.numel() for p in b] for b in buckets] == [[2000], [50, 300], [200, 100]]
    assert sum(len(b) for b in buckets) == len(params)


def test_flat_bucket_gradients_are_views_into_its_buffer():
    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))]
    bucket = FlatBucket(0, torch.arange(10.0), params, is_last=True)
    grads = bucket.gradients()
    assert [g.shape for g in grads] == [(2, 3), (4,)]
    grads[1].fill_(-1)
    assert bucket.buffer()[6:].tolist() == [-1.0] * 4


def test_synchronize_inside_no_sync_is_refused():
    sync = BucketedAllReduce(_params(10))
    with sync.no_sync(), pytest.raises(RuntimeError, match="inside no_sync"):
        sync.synchronize()


def test_a_single_worker_sends_nothing_and_keeps_its_gradients():
    (p,) = _params(10)
    p.grad = torch.ones(10)
    stats = BucketedAllReduce([p]).synchronize()
    assert stats.comm_bytes_sent == 0 and stats.comm_bytes_dense == 40
    assert torch.equal(p.grad, torch.ones(10))


def test_bad_bucket_cap_is_an_error_naming_it():
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        BucketedAllReduce(_params(10), bucket_cap_mb=0)


def test_distributed_model_needs_a_process_group():
    with pytest.raises(RuntimeError, match="process group"):
        DistributedModel(torch.nn.Linear(2, 2))


def test_stats_of_several_synchronisations_add_up_and_keep_the_latest_residual():
    from kilorl.comm import CommStats

    parts = [CommStats(comm_bytes_dense=400, comm_bytes_sent=100, compress_s=0.5, residual_norm=2.0),
             CommStats(comm_bytes_dense=400, comm_bytes_sent=60, compress_s=0.25, residual_norm=1.0)]
    total = CommStats.total(parts).as_metrics()
    assert total["comm_bytes_dense"] == 800 and total["comm_bytes_sent"] == 160
    assert total["comm_ratio"] == 0.2 and total["compress_s"] == 0.75 and total["residual_norm"] == 1.0
