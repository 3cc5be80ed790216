"""The live view behind ``kilorl top RUN_DIR``: every role's throughput and memory trend.

Reads the run's targets file (``RUN_DIR/monitor/targets.json``, kept by the driver),
scrapes each node exporter's ``/metrics`` directly (no Prometheus needed) and folds the
samples into one row per role. The same numbers Prometheus gets, so ``top`` and the
dashboard never disagree.
"""

from __future__ import annotations

import math
import os
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kilorl.monitor.discovery import TargetsFile

MiB = 1024 * 1024


@dataclass
class RoleRow:
    """One role as ``top`` shows it (None: the role does not report that series)."""

    role: str
    rank: str
    node: str
    env_steps: float | None = None
    steps_per_s: float | None = None
    episode_return: float | None = None
    policy_lag: float | None = None
    rss_bytes: float | None = None
    device_bytes: float | None = None
    slope: dict[str, float] = field(default_factory=dict)
    """Leak-detector slope (bytes/s) per memory series (host, device:i)."""
    time_to_limit_s: dict[str, float] = field(default_factory=dict)
    suspected: set[str] = field(default_factory=set)


_SCALAR = {
    "kilorl_env_steps_total": "env_steps",
    "kilorl_env_steps_per_second": "steps_per_s",
    "kilorl_episode_return": "episode_return",
    "kilorl_policy_lag_versions": "policy_lag",
    "kilorl_process_resident_memory_bytes": "rss_bytes",
}


def targets_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "monitor" / "targets.json"


def read_targets(run_dir: str | os.PathLike) -> dict[str, str]:
    """node -> exporter address; empty when the run has ended (or never enabled the monitor)."""
    path = targets_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no targets file (was the run started with monitor.prometheus.enabled?)")
    return TargetsFile(path).targets


def scrape(address: str, timeout_s: float = 3.0) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as r:
        return r.read().decode()


def rows_from_text(text: str) -> list[RoleRow]:
    """One exporter's exposition text -> a row per (role, rank, node)."""
    rows: dict[tuple[str, str, str], RoleRow] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            lab = s.labels
            if "role" not in lab or "rank" not in lab or "node" not in lab:
                continue
            key = (lab["role"], lab["rank"], lab["node"])
            row = rows.setdefault(key, RoleRow(*key))
            name = s.name
            if name in _SCALAR:
                setattr(row, _SCALAR[name], s.value)
            elif name == "kilorl_device_memory_reserved_bytes":
                row.device_bytes = (row.device_bytes or 0.0) + s.value
            elif name == "kilorl_memory_leak_slope_bytes_per_second":
                row.slope[lab["memory"]] = s.value
            elif name == "kilorl_memory_time_to_limit_seconds":
                row.time_to_limit_s[lab["memory"]] = s.value
            elif name == "kilorl_memory_leak_suspected" and s.value >= 1:
                row.suspected.add(lab["memory"])
    return list(rows.values())


def collect(run_dir: str | os.PathLike, timeout_s: float = 3.0) -> tuple[list[RoleRow], list[str]]:
    """Every role of the run, and one error line per exporter that did not answer."""
    rows, errors = [], []
    for node, address in sorted(read_targets(run_dir).items()):
        try:
            rows += rows_from_text(scrape(address, timeout_s))
        except OSError as e:
            errors.append(f"node {node} ({address}): {e}")
    rows.sort(key=lambda r: (r.role, int(r.rank) if r.rank.isdigit() else r.rank, r.node))
    return rows, errors


def _num(v: float | None, fmt: str, scale: float = 1.0) -> str:
    return "-" if v is None or math.isnan(v) else format(v / scale, fmt)


def _trend(row: RoleRow) -> str:
    """The worst memory series: its slope and predicted time to the limit."""
    if not row.slope:
        if row.rss_bytes is None:
            return "-"  # a role whose memory is not watched (a store worker reported by the driver)
        return "warming up"  # no verdict before the detector's warm-up and first window
    memory = min(row.slope, key=lambda m: row.time_to_limit_s.get(m, math.inf))
    slope = row.slope.get(memory)
    ttl = row.time_to_limit_s.get(memory, math.inf)
    text = f"{memory} {_num(slope, '+.2f', MiB)} MiB/s"
    if memory in row.suspected:
        text += f" LEAK, limit in {ttl:.0f} s" if math.isfinite(ttl) else " LEAK"
    return text


def render(rows: list[RoleRow], errors: list[str]) -> str:
    """A fixed-width table, one line per role, then the exporters that did not answer."""
    head = f"{'role':<10}{'rank':>5} {'node':<13}{'env steps':>11}{'steps/s':>9}{'return':>8}{'lag':>5}" \
           f"{'RSS MiB':>9}{'dev MiB':>9}  memory trend"
    lines = [head]
    for r in rows:
        lines.append(
            f"{r.role:<10}{r.rank:>5} {r.node:<13}{_num(r.env_steps, '.0f'):>11}{_num(r.steps_per_s, '.0f'):>9}"
            f"{_num(r.episode_return, '.1f'):>8}{_num(r.policy_lag, '.0f'):>5}{_num(r.rss_bytes, '.0f', MiB):>9}"
            f"{_num(r.device_bytes, '.0f', MiB):>9}  {_trend(r)}")
    if not rows:
        lines.append("(no roles reporting)")
    lines += [f"unreachable: {e}" for e in errors]
    return "\n".join(lines)
