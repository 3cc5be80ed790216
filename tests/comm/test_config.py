"""CompressionConfig: defaults, ranges, and fields that belong to another method are errors naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kilorl.comm import CompressionConfig


def test_default_is_dense_with_the_users_threshold_topk_setting_ready():
    cfg = CompressionConfig()
    assert cfg.method == "none" and not cfg.compresses
    assert (cfg.threshold, cfg.topk_ratio, cfg.error_feedback) == (1e-4, 0.3, True)


def test_every_field_is_documented():
    assert all(f.description for f in CompressionConfig.model_fields.values())


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"method": "threshold_topk", "topk_ratio": 0.0}, "topk_ratio"),
        ({"method": "threshold_topk", "topk_ratio": 1.5}, "topk_ratio"),
        ({"method": "threshold_topk", "threshold": -1e-3}, "threshold"),
        ({"method": "powersgd", "powersgd_rank": 0}, "powersgd_rank"),
        ({"method": "threshold_topk", "warmup_steps": -1}, "warmup_steps"),
        ({"method": "threshold_topk", "index_encoding": "gzip"}, "index_encoding"),
        ({"method": "zstd"}, "method"),
        ({"method": "threshold_topk", "toppk_ratio": 0.3}, "toppk_ratio"),
    ],
)
def test_out_of_range_or_unknown_values_name_the_field(fields, named):
    with pytest.raises(ValidationError) as err:
        CompressionConfig(**fields)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"method": "threshold_topk", "powersgd_rank": 4}, "compression.powersgd_rank"),
        ({"method": "powersgd", "topk_ratio": 0.1}, "compression.topk_ratio"),
        ({"method": "bf16", "error_feedback": False}, "compression.error_feedback"),
        ({"method": "none", "threshold": 1e-3}, "compression.threshold"),
        ({"method": "bf16", "warmup_steps": 10}, "compression.warmup_steps"),
    ],
)
def test_a_field_set_for_another_method_is_an_error_naming_it(fields, named):
    with pytest.raises(ValidationError) as err:
        CompressionConfig(**fields)
    assert named in str(err.value)


def test_fields_of_the_chosen_method_are_accepted():
    cfg = CompressionConfig(method="threshold_topk", threshold=0.0, topk_ratio=1.0, warmup_steps=5, error_feedback=False)
    assert cfg.compresses and cfg.topk_ratio == 1.0
    assert CompressionConfig(method="powersgd", powersgd_rank=4, warmup_steps=3).powersgd_rank == 4


def test_a_dumped_config_with_every_field_loads_again():
    for method in ("none", "bf16", "powersgd", "threshold_topk"):
        dumped = CompressionConfig(method=method).model_dump()
        assert CompressionConfig(**dumped).method == method
    custom = CompressionConfig(method="threshold_topk", topk_ratio=0.05, error_feedback=False).model_dump()
    assert CompressionConfig(**custom).topk_ratio == 0.05
