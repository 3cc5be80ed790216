"""Configuration of a run's distributed engine: store workers, sync modes, rollout transport.

Kept beside ``kilorl.config`` (which composes these sections) so the run's core sections
stay short. See docs/architecture.md, "Distributed engine".
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kilorl.config_section import Section

SyncMode = Literal["sync", "async"]


class StoreSection(Section):
    """Where the run's parameters live: store workers on the data system."""

    address: str | None = None
    """``HOST:PORT`` of a running store worker (``kilorl store start``) to use instead of
    starting one worker per Ray node (None: the run starts and stops its own)."""
    token: str | None = None
    """Token of the worker at ``address`` (None: ``$KILORL_STORE_TOKEN``, the worker's run
    directory on this host, or no token for an ``--insecure`` loopback worker)."""
    shm_size: str = "256MiB"
    """Shared-memory arena of each worker the run starts, e.g. ``512MiB``, ``8GiB``."""
    keep_versions: int = Field(default=4, ge=2)
    """Parameter versions each worker keeps per shard (older ones are reclaimed once no
    reader holds them: an actor's model holds the version it runs on, whose bytes it shares
    with the worker); at least ``train.pipeline_depth + 2`` is a sensible floor."""
    reconnect_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds the run rides out a store worker that died and is being restarted (its
    owner restarts it on the same port): a role's client keeps reconnecting, with backoff,
    and a worker's read from another node keeps trying the holder, this long before the
    error reaches the run. Generous by default, since a restart on a loaded machine takes
    seconds; lower it only to fail fast where workers are never restarted."""
    transport: Literal["ray", "store"] = "ray"
    """How rollouts travel actor -> learner. ``ray``: returned through Ray's object store.
    ``store``: written as one object on the actor's node worker; the learner reads it
    (zero-copy on its node, through the mesh from another) and deletes it after its update."""


class SyncSection(Section):
    """How actors follow the learners' parameter versions."""

    mode: Literal["sync", "async", "hybrid"] = "async"
    """``sync``: rollout ``i`` is collected with exactly version ``i`` (exact on-policy; needs
    ``train.pipeline_depth: 0``). ``async``: actors take the newest version and may run
    ``train.pipeline_depth`` versions ahead; every batch carries its version and the learner
    drops a batch older than ``max_staleness`` (with ``train.pipeline_depth: 0`` this is
    exactly on-policy too). ``hybrid``: per parameter group (``groups``)."""
    max_staleness: int | None = Field(default=None, ge=0)
    """Oldest batch (in versions behind the learner) the learner trains on; None means
    ``train.pipeline_depth`` (async) or 0 (sync)."""
    groups: dict[str, SyncMode] = Field(default_factory=dict)
    """hybrid only: published-name prefix -> mode, e.g. ``{"model/policy_": sync,
    "model/value_": async}``. Actors refresh ``sync`` groups every version and ``async``
    groups only once they are more than ``max_staleness`` versions old. Names matching no
    prefix are ``sync``."""
    durable: bool = False
    """Publish parameters ``WRITE_THROUGH_L2`` (fsynced to the worker's L2 before the
    publish returns), so a restarted store worker still serves the last published version
    (nothing is republished), and a resumed run (``kilorl train --resume``, or a restore
    after a lost learner) continues from that version when it is newer than the checkpoint
    (docs/architecture.md, "Distributed engine")."""

    @model_validator(mode="after")
    def _groups_only_for_hybrid(self) -> SyncSection:
        if self.mode == "hybrid" and not self.groups:
            raise ValueError("sync.groups: hybrid mode needs at least one prefix -> mode entry")
        if self.mode != "hybrid" and self.groups:
            raise ValueError(f"sync.groups: only used with mode: hybrid (mode is {self.mode!r})")
        if any(not p for p in self.groups):
            raise ValueError("sync.groups: an empty prefix would match every parameter; name a prefix")
        return self

    def staleness(self, pipeline_depth: int) -> int:
        """The effective ``max_staleness`` for a run with this pipeline depth."""
        if self.max_staleness is not None:
            return self.max_staleness
        return 0 if self.mode == "sync" else pipeline_depth

    def check(self, pipeline_depth: int) -> None:
        """Cross-field rules against ``train.pipeline_depth``; errors name both fields."""
        if self.mode == "sync" and pipeline_depth:
            raise ValueError(f"sync.mode=sync collects every rollout with the newest version: it needs "
                             f"train.pipeline_depth=0 (got {pipeline_depth}); use sync.mode=async to pipeline")
        if self.staleness(pipeline_depth) < pipeline_depth:
            raise ValueError(f"sync.max_staleness={self.max_staleness} is below train.pipeline_depth="
                             f"{pipeline_depth}: the pipeline itself would produce batches the learner drops")
