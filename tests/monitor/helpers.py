"""Parsing helpers shared by the monitor tests."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kilorl.monitor.metrics import METRICS


def series(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Exposition text -> {sample name: [(labels, value)]}."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def identities(text: str, sample: str) -> set[tuple[str, str, str]]:
    """(role, rank, node) of every series of ``sample``."""
    return {(lab["role"], lab["rank"], lab["node"]) for lab, _ in series(text).get(sample, [])}


def sample_name(m) -> str:
    """The sample that always exists for a metric (histograms: its _count)."""
    return m.name + "_count" if m.kind == "histogram" else m.name


CPU_METRICS = [m for m in METRICS if m.cpu_present]
