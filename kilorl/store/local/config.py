"""Worker configuration: sizes like ``512MiB``, capacity ratios, watermarks.

Ratios mean "this share of the tier's physical capacity": RAM for DRAM, the file system
under ``disk_dir`` for disk, the device's memory for the device tier.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kilorl.store.errors import ConfigError
from kilorl.store.wire.rundir import default_run_dir

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}
TIERS = ("device", "dram", "disk")


def parse_size(text: str | int, field_name: str = "size") -> int:
    """``'512MiB'`` -> 536870912; integers pass through. Errors name the field."""
    if isinstance(text, int):
        if text < 0:
            raise ConfigError(f"{field_name}: must be >= 0, got {text}")
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"{field_name}: cannot parse size {text!r} (examples: 4096, 512MiB, 8GiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _ratio(value: float, field_name: str) -> float:
    if not 0 < value <= 1:
        raise ConfigError(f"{field_name}: ratio must be in (0, 1], got {value}")
    return value


@dataclass
class WorkerConfig:
    """Everything a worker needs; ``resolve()`` turns ratios into byte sizes."""

    host: str = "127.0.0.1"
    """TCP bind address; loopback by default."""
    port: int = 31501
    """TCP port (0 picks a free one; the chosen port is written to the run dir)."""
    token: str | None = None
    """Shared secret every connection must present; generated if absent and not insecure."""
    insecure: bool = False
    """Accept connections without a token; refused unless ``host`` is loopback."""
    run_dir: str | None = None
    """Directory for the Unix socket, pid, token and log files (default per port in /tmp)."""
    shm_size: int | str | None = None
    """DRAM arena size; default 10% of RAM when neither this nor ``dram_ratio`` is set."""
    dram_ratio: float | None = None
    """DRAM arena as a share of physical RAM."""
    disk_dir: str | None = None
    """Spill directory of the disk tier; no disk tier when unset."""
    disk_size: int | str | None = None
    """Byte limit of the disk tier."""
    ssd_ratio: float | None = None
    """Disk tier as a share of the file system holding ``disk_dir``."""
    device: str | None = None
    """Torch device of the device tier (``cuda:0``; ``cpu`` runs the same code path)."""
    device_size: int | str | None = None
    """Byte limit of the device tier."""
    hbm_ratio: float | None = None
    """Device tier as a share of the device's memory."""
    l2_dir: str | None = None
    """Durable L2 directory for WRITE_THROUGH_L2 / WRITE_BACK_L2; L2 modes fail without it."""
    max_payload: int | str = "2GiB"
    """Largest payload in one frame."""
    high_watermark: float = 0.90
    """A tier fuller than this share demotes its coldest objects ..."""
    low_watermark: float = 0.75
    """... until it is below this share."""
    promote_after: int = 1
    """Accesses (with recency decay) after which an object below its preferred tier is promoted."""
    write_back_queue: int = 4096
    """Bound of the write-back queue; a full queue makes WRITE_BACK_L2 sets wait (back-pressure)."""
    keep_versions: int = 2
    """Versions of a published name the worker keeps; older ones go when no reader holds them."""
    stream_capacity: int = 1024
    """Default bound on unacknowledged messages per stream (producers block when full)."""
    ack_timeout_s: float = 30.0
    """A delivered, unacknowledged message is redelivered after this long (or at once if its consumer died)."""
    tier_rules: list[tuple[str, str]] = field(default_factory=list)
    """(key prefix, tier) preferences, first match wins, e.g. ``('policy/', 'device')``."""

    def resolve(self) -> ResolvedConfig:
        import psutil

        if self.insecure and not _is_loopback(self.host):
            raise ConfigError(f"insecure: --insecure is only allowed on a loopback host, not {self.host!r}")
        if not 0 < self.low_watermark < self.high_watermark <= 1:
            raise ConfigError("low_watermark/high_watermark: need 0 < low < high <= 1")
        for name in ("write_back_queue", "keep_versions", "stream_capacity"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.ack_timeout_s <= 0:
            raise ConfigError(f"ack_timeout_s: must be > 0, got {self.ack_timeout_s}")
        ram = psutil.virtual_memory().total
        if self.shm_size is not None:
            shm = parse_size(self.shm_size, "shm_size")
        elif self.dram_ratio is not None:
            shm = int(ram * _ratio(self.dram_ratio, "dram_ratio"))
        else:
            shm = ram // 10
        if shm < 1024 * 1024:
            raise ConfigError(f"shm_size: need at least 1MiB, got {shm}")
        disk = 0
        if self.disk_dir:
            Path(self.disk_dir).mkdir(parents=True, exist_ok=True)
            if self.disk_size is not None:
                disk = parse_size(self.disk_size, "disk_size")
            elif self.ssd_ratio is not None:
                disk = int(shutil.disk_usage(self.disk_dir).total * _ratio(self.ssd_ratio, "ssd_ratio"))
            else:
                disk = shutil.disk_usage(self.disk_dir).free // 2
        elif self.disk_size is not None or self.ssd_ratio is not None:
            raise ConfigError("disk_dir: --disk-size/--ssd-ratio need --disk-dir")
        dev = 0
        if self.device:
            from kilorl.store.local.tiers.device import device_capacity

            physical = device_capacity(self.device)  # fails clearly for unknown/unavailable devices
            if self.device_size is not None:
                dev = parse_size(self.device_size, "device_size")
            elif self.hbm_ratio is not None:
                dev = int(physical * _ratio(self.hbm_ratio, "hbm_ratio"))
            else:
                raise ConfigError("device_size: --device needs --device-size or --hbm-ratio")
        elif self.device_size is not None or self.hbm_ratio is not None:
            raise ConfigError("device: --device-size/--hbm-ratio need --device")
        for prefix, tier in self.tier_rules:
            if tier not in TIERS:
                raise ConfigError(f"tier_rules: tier for {prefix!r} must be one of {TIERS}, got {tier!r}")
        run_dir = Path(self.run_dir) if self.run_dir else default_run_dir(self.port)
        return ResolvedConfig(self, shm, disk, dev, run_dir, parse_size(self.max_payload, "max_payload"))


@dataclass
class ResolvedConfig:
    """A WorkerConfig with every capacity in bytes."""

    spec: WorkerConfig
    shm_bytes: int
    disk_bytes: int
    device_bytes: int
    run_dir: Path
    max_payload: int


def _is_loopback(host: str) -> bool:
    from kilorl.store.wire.protocol import is_loopback

    return is_loopback(host)
