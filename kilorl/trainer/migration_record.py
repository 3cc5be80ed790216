"""What a migration attempt leaves behind (kilorl.trainer.migration): its record and its events.

Events go to ``kilorl_migration_events_total`` (the driver reports as role ``driver``), each
finished attempt to ``RUN_DIR/monitor/migrations.jsonl`` with the time from the decision to
the replacement serving. Kept apart from the executor so that the actor and learner moves
can write records without importing it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kilorl.monitor.settings import MonitorConfig

IN_PLACE = "restarted_in_place"
"""Outcome and event of a role restarted on its own node (no other node had room)."""


@dataclass
class MigrationRecord:
    """One attempt, as written to ``migrations.jsonl``."""

    role: str
    rank: int
    outcome: str
    """``completed``, ``restarted_in_place``, ``failed`` or ``no_room``."""
    from_node: str
    to_node: str | None
    reason: str
    iteration: int
    """The last version published when the decision was taken."""
    env_steps: int
    """Env steps delivered when the decision was taken."""
    level_bytes: float
    """The suspect series' level at the decision."""
    limit_bytes: float | None
    decided_at: float
    """Wall clock of the decision."""
    serving_s: float | None
    """Seconds from the decision to the replacement serving (None when none serves)."""
    detail: str = ""
    old_ended_s: float | None = None
    """Seconds from the decision to the old process ending (a restart in place: when its leak stopped)."""


class MigrationLog:
    """The driver's migration events (a Prometheus counter) and finished records (a JSON-lines file)."""

    def __init__(self, run_dir: Path, config: MonitorConfig) -> None:
        self.run_dir, self.config = run_dir, config
        self.records: list[MigrationRecord] = []
        self._metrics: Any = None

    def event(self, role: str, rank: int, event: str) -> None:
        if self._metrics is None:  # the driver's own series appear with its first migration event
            from kilorl.monitor.runtime import role_metrics
            from kilorl.roles.monitoring import current_node

            self._metrics = role_metrics(self.run_dir, "driver", 0, current_node(), self.config)
        self._metrics.record_migration(role, rank, event)

    def finish(self, record: MigrationRecord) -> None:
        self.records.append(record)
        path = self.run_dir / "monitor" / "migrations.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(asdict(record)) + "\n")
        took = f" in {record.serving_s:.1f} s" if record.serving_s is not None else ""
        print(f"migration: {record.role}[{record.rank}] {record.outcome}{took}: {record.from_node} -> "
              f"{record.to_node}; {record.detail}", flush=True)

    def close(self) -> None:
        """Send the last events and stop reporting."""
        if self._metrics is not None:
            self._metrics.push()
            self._metrics.close()
            self._metrics = None
