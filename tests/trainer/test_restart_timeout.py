"""``train.restart_timeout_s``: how long every data path waits for a lost rollout, from the config.

The env runner here is a real Ray actor whose every collection fails the way one whose store
worker came back empty does (``ParametersLost``): the data path republishes and asks again
until the configured deadline, then the run fails with the error and a note naming the field.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from kilorl.config import ConfigError, config_from_dict
from kilorl.params.reconnect import ParametersLost
from kilorl.trainer.loop import OnPolicyLoop
from kilorl.trainer.queue_loop import QueueLoop
from kilorl.trainer.replay_loop import ReplayLoop
from tests.conftest import tiny_config

DEADLINE_S = 1.0


class LosesParameters:
    """An env runner whose node's store worker always comes back without the parameters."""

    def collect(self, min_version: int, env_steps: int) -> tuple[None, None]:
        raise ParametersLost("policy: the store worker restarted without the parameters")


class Publisher:
    """A learner that only republishes."""

    def __init__(self) -> None:
        self.published = 0

    def publish(self, version: int) -> None:
        self.published += 1

    def count(self) -> int:
        return self.published


def test_restart_timeout_must_be_positive_and_the_error_names_the_field():
    with pytest.raises(ConfigError, match=r"train\.restart_timeout_s"):
        config_from_dict({"train": {"restart_timeout_s": 0}})
    assert tiny_config().train.restart_timeout_s == 120.0


def _first_batch(loop) -> None:
    if isinstance(loop, OnPolicyLoop):
        loop._submit()
        loop._resolve(*loop.pending.popleft())
    else:
        next(iter(loop))


@pytest.fixture(scope="module")
def roles(ray_local):
    """One env runner that loses its parameters and one learner, shared by the three paths."""
    actor = ray_local.remote(num_cpus=0)(LosesParameters).remote()
    learner = ray_local.remote(num_cpus=0)(Publisher).remote()
    yield SimpleNamespace(actors=[actor], learners=[learner], learners_per_policy=False, rank_zeros=lambda: [learner])
    ray_local.kill(actor)
    ray_local.kill(learner)


@pytest.mark.parametrize("path", [OnPolicyLoop, ReplayLoop, QueueLoop], ids=["on_policy", "replay", "queue"])
def test_each_data_path_gives_up_on_a_lost_rollout_at_the_configured_deadline(roles, path):
    import ray

    algo = {"name": "impala"} if path is QueueLoop else {}  # the queue path's options are IMPALA's
    cfg = tiny_config(train={"restart_timeout_s": DEADLINE_S}, algo=algo)
    loop = path(cfg, roles, 0, 0)
    before = ray.get(roles.learners[0].count.remote())
    t0 = time.monotonic()
    with pytest.raises(ParametersLost) as err:
        _first_batch(loop)
    waited = time.monotonic() - t0
    republished = ray.get(roles.learners[0].count.remote()) - before
    assert waited >= DEADLINE_S  # it kept trying until the deadline the config set
    assert republished >= 1 and loop.republished == republished  # republishing each time, as for a real loss
    assert any("train.restart_timeout_s (1 s)" in note for note in getattr(err.value, "__notes__", []))
