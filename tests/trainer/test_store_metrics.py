"""The driver's reading of store workers: tier usage and the lookups behind the hit rates."""

from __future__ import annotations

from kilorl.trainer.store_metrics import tier_lookups, tier_usage


def test_lookups_count_a_read_for_the_tier_that_served_it_and_a_miss_for_every_warmer_tier():
    got = tier_lookups({"reads_device": 2, "reads_dram": 90, "reads_disk": 7, "reads_l2": 3, "promotions": 5})
    assert got == {"device": (2, 0), "host": (90, 10), "disk": (7, 3)}


def test_a_worker_without_read_counters_reports_no_lookups():
    assert tier_lookups({}) == {"device": (0, 0), "host": (0, 0), "disk": (0, 0)}


def test_tier_usage_uses_the_metric_labels():
    stats = {"tiers": {"dram": {"used": 10, "capacity": 100}, "disk": {"used": 0, "capacity": 5}}}
    assert tier_usage(stats) == {"host": (10.0, 100.0), "disk": (0.0, 5.0)}
