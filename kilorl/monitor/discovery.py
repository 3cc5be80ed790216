"""File-based service discovery: the targets file Prometheus follows, and its scrape config.

The driver keeps one JSON targets file listing every node exporter. Prometheus'
``file_sd_configs`` watches it, so exporters that start, die or move are followed
without restarting or reloading Prometheus (and without a Pushgateway, which never
forgets a dead series). The file is rewritten atomically (temporary file, fsync,
rename) so Prometheus never reads half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

DEFAULT_JOB = "kilorl"


def node_socket_path(base_dir: str | os.PathLike, node: str) -> Path:
    """Where the exporter of ``node`` listens for its roles' snapshots (a short path: AF_UNIX limits length)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
    return Path(base_dir) / f"{safe}.sock"


class TargetsFile:
    """The set of node exporters, mirrored into a file_sd JSON file on every change."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._targets: dict[str, str] = {}
        self._lock = threading.Lock()
        if self.path.exists():
            for group in json.loads(self.path.read_text() or "[]"):
                self._targets[group["labels"]["exporter_node"]] = group["targets"][0]
        else:
            self._write()

    def set(self, node: str, address: str) -> None:
        """Add or move the exporter of ``node`` to ``address`` (``host:port``)."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"TargetsFile.set: 'address' must be host:port, got {address!r}")
        with self._lock:
            self._targets[node] = address
            self._write()

    def remove(self, node: str) -> None:
        with self._lock:
            if self._targets.pop(node, None) is not None:
                self._write()

    @property
    def targets(self) -> dict[str, str]:
        with self._lock:
            return dict(self._targets)

    def _write(self) -> None:
        groups = [{"targets": [addr], "labels": {"exporter_node": node}} for node, addr in sorted(self._targets.items())]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(groups, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _duration(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def scrape_config(targets_file: str | os.PathLike, *, scrape_interval_s: float = 5.0, job: str = DEFAULT_JOB) -> dict[str, Any]:
    """A Prometheus configuration scraping every exporter listed in ``targets_file``.

    ``honor_labels`` keeps the exporters' own ``role``/``rank``/``node`` labels authoritative.
    """
    interval = _duration(scrape_interval_s)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "scrape_interval": interval,
                "scrape_timeout": _duration(min(scrape_interval_s, 10.0)),
                "file_sd_configs": [{"files": [str(Path(targets_file).resolve())], "refresh_interval": "30s"}],
            }
        ],
    }


def write_prometheus_config(
    path: str | os.PathLike, targets_file: str | os.PathLike, *, scrape_interval_s: float = 5.0, job: str = DEFAULT_JOB
) -> Path:
    """Write :func:`scrape_config` as YAML (``prometheus --config.file=PATH``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(scrape_config(targets_file, scrape_interval_s=scrape_interval_s, job=job), sort_keys=False))
    return p
