"""LearnerSync (the learner contract over kilorl.comm) on two gloo ranks: weights agree, gradients are the old average."""

from __future__ import annotations

import pytest
import torch

from kilorl.comm import CompressionConfig, GradientAllReducer, LearnerSync
from tests.comm.dist_helpers import run_workers

LOSSLESS = CompressionConfig(method="threshold_topk", threshold=0.0, topk_ratio=1.0, value_dtype="float32")


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def _run(rank: int, world: int) -> dict:
    out = {}
    for name, comp, overlap in (("dense", None, True), ("lossless-topk", LOSSLESS, False)):
        torch.manual_seed(rank)  # different initial weights per rank: prepare() must fix that
        model, ref = _mlp(), _mlp()
        sync = LearnerSync(world, comp, bucket_cap_mb=0.002, overlap_compute_comm=overlap)
        module = sync.prepare(model)
        ref.load_state_dict(model.state_dict())  # not a deepcopy: that could copy the gradient hooks
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        g = torch.Generator().manual_seed(10 + rank)
        parts = [torch.randn(8, 6, generator=g) for _ in range(3)]
        for i, x in enumerate(parts):
            with sync.no_sync() if i < len(parts) - 1 else torch.enable_grad():
                module(x).pow(2).sum().backward()
            ref(x).pow(2).sum().backward()
        sync.synchronize(list(model.parameters()))
        GradientAllReducer(world).average_gradients(list(ref.parameters()))
        out[name] = {"weights": weights, "stats": sync.stats(), "again": sync.stats(),
                     "grads": [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())]}
        try:
            sync.synchronize(list(ref.parameters()))
            out[name]["wrong_params"] = "accepted"
        except ValueError as e:
            out[name]["wrong_params"] = str(e)
    return out


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return run_workers(_run, timeout=120)


@pytest.mark.parametrize("name", ["dense", "lossless-topk"])
def test_prepare_makes_every_rank_start_from_rank_zeros_weights(runs, name):
    assert torch.equal(runs[0][name]["weights"], runs[1][name]["weights"])


@pytest.mark.parametrize("name", ["dense", "lossless-topk"])
def test_accumulated_gradients_equal_the_old_flattened_average(runs, name):
    for r in runs:
        for new, old in r[name]["grads"]:
            torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-6)


def test_stats_report_the_comm_metrics_once(runs):
    for r in runs:
        dense, topk = r["dense"]["stats"], r["lossless-topk"]["stats"]
        assert set(dense) >= {"comm_bytes_dense", "comm_bytes_sent", "comm_ratio", "compress_s", "residual_norm"}
        assert dense["comm_ratio"] == 1.0 and topk["comm_bytes_encoded"] > 0
        assert r["dense"]["again"] == {}


def test_parameters_other_than_the_prepared_models_are_refused(runs):
    assert "not the parameters given to prepare()" in runs[0]["dense"]["wrong_params"]
