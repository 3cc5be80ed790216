"""The metric table follows the Prometheus naming conventions."""

from __future__ import annotations

import re

import pytest

from kilorl.monitor.metrics import BY_NAME, IDENTITY_LABELS, METRICS, spec

UNITS = ("_seconds", "_bytes", "_ratio", "_total", "_versions", "_per_second", "_bytes_per_second", "_suspected")


@pytest.mark.parametrize("m", METRICS, ids=lambda m: m.name)
def test_every_metric_is_prefixed_snake_case_with_a_unit_or_kind_suffix(m):
    assert re.fullmatch(r"kilorl_[a-z0-9_]+", m.name)
    assert m.name.endswith(UNITS) or m.name in ("kilorl_episode_return",), m.name
    assert len(m.help) > 15 and m.help.endswith(".")


@pytest.mark.parametrize("m", METRICS, ids=lambda m: m.name)
def test_counters_end_in_total_and_only_counters_do(m):
    assert (m.kind == "counter") == m.name.endswith("_total")


def test_latencies_are_histograms_not_summaries():
    seconds = [m for m in METRICS if m.name.endswith("_seconds") and "time_to_limit" not in m.name]
    assert seconds and all(m.kind == "histogram" for m in seconds)
    assert {m.kind for m in METRICS} <= {"counter", "gauge", "histogram"}


def test_identity_labels_come_first_and_are_never_redeclared():
    for m in METRICS:
        assert m.labels[:3] == IDENTITY_LABELS
        assert not set(m.extra_labels) & set(IDENTITY_LABELS)


def test_the_metrics_the_issue_names_exist():
    for name in ("kilorl_env_steps_total", "kilorl_episodes_total", "kilorl_param_publish_latency_seconds",
                 "kilorl_process_resident_memory_bytes", "kilorl_gpu_utilization_ratio", "kilorl_comm_bytes_total",
                 "kilorl_memory_time_to_limit_seconds", "kilorl_migration_events_total"):
        assert name in BY_NAME


def test_an_unknown_metric_name_is_an_error_listing_the_known_ones():
    with pytest.raises(KeyError, match="kilorl_env_steps_total"):
        spec("kilorl_env_stepz_total")
