"""An env runner's copy of the published policy: which tensors it reads, and how each new
version gets into its model (copied into the model's own tensors, or taken as views).

Kept apart from stepping the environments: what reaches the model is the parameter store's
business and the sync groups', not the step record's.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.core import ParameterStore
from kilorl.roles.sync_groups import SyncGroups
from kilorl.store.client.board_reads import MAX_COPY

COPY_IN_MAX_BYTES = MAX_COPY
"""Up to this size an env runner copies each version into the model it keeps (``fetch_into``);
larger, its model takes the store's memory as views (``fetch(share=True)``). Below it, a
read on the node is a private copy from the worker's version board anyway, and copying
that into the same tensors every time costs less than new tensors and ``load_state_dict``:
10K parameters, 4 actors, 2 cores, p50 publish -> in the model 0.43 ms copied in against
0.54 ms as views (``benchmarks/param_sync_bench.py --runs 6``, both ways in every run)."""


class PolicyCopy:
    """The model an env runner acts with, and the normaliser statistics it applies."""

    def __init__(self, store: ParameterStore, model: torch.nn.Module, obs_shape: tuple[int, ...],
                 normalize_obs: bool, normalize_reward: bool, sync: SyncGroups | None = None, *,
                 mode: str = "sync", groups: list | None = None, max_staleness: int = 0,
                 name: str = keys.POLICY) -> None:
        """``name``: what the policy is published under (``keys.published_name``)."""
        self.store, self.model, self.name = store, model, name
        self.layout = keys.actor_layout(list(model.state_dict()), normalize_obs, normalize_reward)
        self.version = -1
        self.groups = sync or SyncGroups(self.layout, mode, groups or [], max_staleness)
        self.obs_mean = np.zeros(obs_shape, np.float32)
        self.obs_var = np.ones_like(self.obs_mean)
        self.ret_var = np.ones((), np.float32)
        self._into: dict[str, torch.Tensor] | None = self._destinations()
        if sum(t.nbytes for t in self._into.values()) > COPY_IN_MAX_BYTES:
            self._into = None  # large: taking the store's memory as views copies nothing at all
        if self._into is not None and keys.OBS_RMS + "mean" in self._into:  # statistics live in the tensors fetch_into fills
            self.obs_mean, self.obs_var = (self._into[keys.OBS_RMS + k].numpy() for k in ("mean", "var"))
        if self._into is not None and keys.RET_RMS + "var" in self._into:
            self.ret_var = self._into[keys.RET_RMS + "var"].numpy()

    def sync(self, min_version: int, timeout: float = 600.0) -> float:
        """Take the newest version >= ``min_version``; returns seconds spent waiting."""
        t0 = time.perf_counter()
        latest = self.store.wait(self.name, min_version, timeout)
        if latest != self.version:
            self._take(latest)
        return time.perf_counter() - t0

    def refresh(self) -> bool:
        """Take a version newer than the one held if one is published, without waiting (the
        ``queue`` path's mid-rollout refresh); True when the model changed. On the store
        worker's host the check reads its version board, not a request."""
        try:
            latest = self.store.wait(keys.POLICY, self.version + 1, 0.0)
        except TimeoutError:
            return False
        self._take(latest)
        return True

    def _take(self, latest: int) -> None:
        # The newest version (>= latest): a store may already have reclaimed ``latest``.
        wanted = self.groups.wanted(latest)
        version = self._copy_in(wanted) if self._into is not None else None
        if version is None:
            version = self._load(wanted)
        self.groups.took(version, wanted)
        self.version = version

    def _copy_in(self, wanted: list[str]) -> int | None:
        """The newest version copied straight into the model's own tensors and the normaliser
        statistics (``fetch_into``: no new tensors, no ``load_state_dict``); None, and never
        again, when they cannot hold it (the published tensors differ from the model's)."""
        try:
            return self.store.fetch_into(self.name, self._into, None, wanted)
        except ValueError:  # LayoutError from the store's own copy, or the generic one's
            self._into = None
            return None

    def _load(self, wanted: list[str]) -> int:
        # share: on the node the weights are views of the store's memory, and the model takes
        # them as they are (assign): no copy at all.
        version, tensors = self.store.fetch(self.name, None, wanted, share=True)
        state = {k.removeprefix(keys.MODEL): torch.as_tensor(np.asarray(v)) for k, v in tensors.items()
                 if k.startswith(keys.MODEL)}
        self.model.load_state_dict(state, strict=len(wanted) == len(self.layout), assign=True)
        if keys.OBS_RMS + "mean" in tensors:
            self.obs_mean = np.array(tensors[keys.OBS_RMS + "mean"])
            self.obs_var = np.array(tensors[keys.OBS_RMS + "var"])
        if keys.RET_RMS + "var" in tensors:
            self.ret_var[...] = float(np.asarray(tensors[keys.RET_RMS + "var"]).reshape(-1)[0])
        return version

    def _destinations(self) -> dict[str, torch.Tensor]:
        """What ``fetch_into`` copies each version into: the model's parameters and buffers,
        and the normaliser statistics the env runner applies (``obs_mean``, ``obs_var``,
        ``ret_var`` are numpy views of them), in the dtypes and shapes the learner publishes."""
        into = {keys.MODEL + k: t for k, t in self.model.state_dict(keep_vars=True).items()}
        stats = {keys.OBS_RMS + "mean": torch.zeros(self.obs_mean.shape), keys.OBS_RMS + "var": torch.ones(self.obs_mean.shape),
                 keys.RET_RMS + "var": torch.ones(())}
        into.update({k: v for k, v in stats.items() if k in self.layout})
        return into
