"""Threshold + top-k selection and its error feedback (single process, exact arithmetic checks)."""

from __future__ import annotations

import math

import torch

from kilorl.comm import CompressionConfig
from kilorl.comm import encoding as enc
from kilorl.comm.compressors import ThresholdTopK


def _topk(**fields) -> ThresholdTopK:
    return ThresholdTopK(CompressionConfig(method="threshold_topk", **fields))


def test_keeping_everything_in_fp32_round_trips_exactly_through_the_encoding():
    grad = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    sel = _topk(threshold=0.0, topk_ratio=1.0, value_dtype="float32").select(0, grad)
    decoded = enc.decode(enc.encode(sel.indices, sel.values, sel.numel))
    out = torch.zeros(5000).index_put_((decoded.indices,), decoded.values)
    assert torch.equal(out, grad)


def test_bf16_values_round_to_bf16_and_the_rounding_goes_to_the_residual():
    grad = torch.randn(5000, generator=torch.Generator().manual_seed(2))
    comp = _topk(threshold=0.0, topk_ratio=1.0)
    sel = comp.select(0, grad)
    assert torch.equal(sel.dense(), grad.bfloat16().float())
    assert torch.allclose(sel.dense() + comp.residuals[0], grad, atol=0, rtol=1e-6)


def test_entries_below_threshold_are_dropped_and_the_largest_ratio_of_the_rest_kept():
    grad = torch.tensor([5e-5, -3.0, 0.2, -1e-5, 0.5, -0.1, 2.0, 8e-5, 1e-3, -0.7])
    sel = _topk(threshold=1e-4, topk_ratio=0.5, value_dtype="float32", error_feedback=False).select(0, grad)
    # 7 entries are >= 1e-4; ceil(0.5 * 7) = 4 largest: -3.0, 2.0, -0.7, 0.5
    assert sel.indices.tolist() == [1, 4, 6, 9]
    assert torch.equal(sel.values, grad[[1, 4, 6, 9]])


def test_the_input_gradient_buffer_is_not_modified():
    grad = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    before = grad.clone()
    comp = _topk(topk_ratio=0.1)
    comp.select(0, grad)
    comp.select(0, grad)
    assert torch.equal(grad, before)


def _drifting_gradients(steps: int, numel: int = 4000):
    """Half the coordinates have a mean (0.05) below the threshold (0.1): without feedback they never pass."""
    g = torch.Generator().manual_seed(4)
    mean = torch.where(torch.arange(numel) % 2 == 0, torch.tensor(1.0), torch.tensor(0.05))
    for _ in range(steps):
        yield mean * (1 + 0.1 * torch.randn(numel, generator=g))


def test_with_error_feedback_sum_of_applied_updates_plus_residual_equals_sum_of_gradients():
    comp = _topk(threshold=0.1, topk_ratio=0.3)
    applied, true = torch.zeros(4000, dtype=torch.float64), torch.zeros(4000, dtype=torch.float64)
    for grad in _drifting_gradients(300):
        applied += comp.select(0, grad).dense().double()
        true += grad.double()
    assert torch.allclose(applied + comp.residuals[0].double(), true, rtol=1e-5, atol=1e-5)
    # the residual stays bounded while the sums grow, so the applied sum converges to the true one
    assert (applied - true).norm() / true.norm() < 0.01
    small = torch.arange(4000) % 2 == 1
    assert ((applied - true)[small].norm() / true[small].norm()) < 0.1


def test_without_error_feedback_small_coordinates_are_never_applied():
    comp = _topk(threshold=0.1, topk_ratio=0.3, error_feedback=False)
    applied, true = torch.zeros(4000, dtype=torch.float64), torch.zeros(4000, dtype=torch.float64)
    for grad in _drifting_gradients(300):
        applied += comp.select(0, grad).dense().double()
        true += grad.double()
    small = torch.arange(4000) % 2 == 1
    assert applied[small].abs().max() == 0
    assert (applied - true).norm() / true.norm() > 0.3


def test_residual_norm_reports_what_is_owed():
    comp = _topk(threshold=10.0, topk_ratio=1.0)  # nothing passes: everything is owed
    grad = torch.full((100,), 0.5)
    comp.select(0, grad)
    comp.select(1, grad)
    assert math.isclose(comp.residual_norm(), math.sqrt(2 * 100 * 0.25), rel_tol=1e-9)


def test_ties_at_the_kth_magnitude_still_keep_exactly_k_entries():
    grad = torch.tensor([1.0, -1.0, 1.0, 0.5, 1.0, -1.0, 0.2, 2.0])
    sel = _topk(threshold=0.0, topk_ratio=0.5, value_dtype="float32").select(0, grad)
    assert sel.indices.tolist() == [0, 1, 2, 7]  # 2.0 plus the first three of the five 1.0s


def test_the_kept_entries_are_the_largest_magnitudes():
    grad = torch.randn(10_000, generator=torch.Generator().manual_seed(5))
    sel = _topk(threshold=0.5, topk_ratio=0.2, value_dtype="float32", error_feedback=False).select(0, grad)
    above = int((grad.abs() >= 0.5).sum())
    assert sel.indices.numel() == math.ceil(0.2 * above)
    kept = torch.zeros(10_000, dtype=torch.bool).index_fill_(0, sel.indices, True)
    assert grad.abs()[kept].min() >= grad.abs()[~kept].max()
