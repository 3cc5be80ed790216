"""The learner reaches gradient communication only through GradientComm, as the contract says."""

from __future__ import annotations

import contextlib

import pytest

from kilorl.roles.grad_comm import AllReduceComm
from kilorl.roles.learner import LearnerRole
from kilorl.roles.parameter_store import InMemoryParameterStore
from tests.conftest import fake_rollout, tiny_config


class CountingSync(AllReduceComm):
    """The real single-rank implementation, counting how the algorithm drives it."""

    def __init__(self) -> None:
        super().__init__(1)
        self.prepared = self.synchronized = self.quiet_backwards = 0
        self.in_no_sync = False

    def prepare(self, model):
        self.prepared += 1
        return super().prepare(model)

    @contextlib.contextmanager
    def no_sync(self):
        assert not self.in_no_sync
        self.in_no_sync = True
        self.quiet_backwards += 1
        try:
            yield
        finally:
            self.in_no_sync = False

    def synchronize(self, params):
        assert not self.in_no_sync  # never inside no_sync: that is where DDP would skip the all-reduce
        self.synchronized += 1
        super().synchronize(params)

    def stats(self):
        return {"comm_test_calls": float(self.synchronized)}


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_micro_batches_but_the_last_run_in_no_sync_and_each_step_synchronizes_once(algo):
    micro = 4
    fields = {"name": algo, "rollout_length": 32}
    if algo == "ppo":
        fields |= {"num_minibatches": 2, "update_epochs": 3}
    cfg = tiny_config(algo=fields, train={"gradient_accumulation_steps": micro})
    sync = CountingSync()
    learner = LearnerRole(cfg, InMemoryParameterStore(), grad_comm=sync)
    stats = learner.update(1, 128, fake_rollout(0))
    steps = 2 * 3 if algo == "ppo" else 1  # optimizer steps in one update
    assert sync.prepared == 1
    assert sync.synchronized == steps
    assert sync.quiet_backwards == steps * (micro - 1)
    assert stats["comm_test_calls"] == steps  # the sync's stats reach the update's metrics
