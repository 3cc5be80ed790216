"""While a data path waits, the driver keeps deciding (kilorl.trainer.waiting, kilorl.trainer.migration).

A fast leak cannot wait for the iteration to end: a waiting data path calls its hook (the
migrator's round) until what it waits for is in; a role answers ``memory_status`` from its
own concurrency group while its ``collect`` runs; an actor decision is carried out during an
update, a learner's only once no update is in flight.
"""

from __future__ import annotations

import threading
import time

import pytest

from kilorl.monitor.migration import MigrationDecision
from kilorl.trainer.migration import Migrator
from kilorl.trainer.session import MONITOR_GROUP, ROLE_CONCURRENCY
from kilorl.trainer.waiting import RunStopped, wait_some


class _Busy:
    """A role stand-in: ``work`` holds the default group until ``memory_status`` has answered."""

    def __init__(self) -> None:
        self.answered = threading.Event()

    def work(self, timeout_s: float) -> bool:
        return self.answered.wait(timeout_s)  # True only if memory_status ran while work was running

    def memory_status(self) -> list:
        self.answered.set()
        return []


def test_a_waiting_data_path_calls_its_hook_until_the_ref_is_in_and_says_whether_an_update_runs(ray_local):
    ray = ray_local
    calls: list[bool] = []

    @ray.remote(num_cpus=0)
    def slow() -> int:
        time.sleep(1.0)
        return 7

    def hook(updating: bool) -> None:
        calls.append(updating)

    ref = slow.remote()
    assert wait_some([ref], hook, updating=True) == [ref] and ray.get(ref) == 7
    assert calls and set(calls) == {True}  # called while waiting, told an update was in flight


def test_a_hook_that_ends_the_role_waited_on_returns_its_failed_ref_and_a_stop_leaves_the_wait(ray_local):
    ray = ray_local
    busy = ray.remote(num_cpus=0, concurrency_groups=ROLE_CONCURRENCY)(_Busy).remote()
    ref = busy.work.remote(600.0)
    done = wait_some([ref], lambda updating: ray.kill(busy), updating=False)
    assert done == [ref]
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(ref)

    def stop(updating: bool) -> None:
        raise RunStopped("actor[0] could not be moved")

    @ray.remote(num_cpus=0)
    def forever() -> None:
        time.sleep(600)

    never = forever.remote()
    with pytest.raises(RunStopped, match="could not be moved"):
        wait_some([never], stop, updating=False)
    ray.cancel(never, force=True)


def test_a_role_answers_memory_status_from_its_own_group_while_its_work_runs(ray_local):
    ray = ray_local
    busy = ray.remote(num_cpus=0, concurrency_groups=ROLE_CONCURRENCY)(_Busy).remote()
    work = busy.work.remote(60.0)
    assert ray.get(busy.memory_status.options(concurrency_group=MONITOR_GROUP).remote(), timeout=60) == []
    assert ray.get(work, timeout=60) is True  # it answered while work held the default group
    ray.kill(busy)


def _decision(role: str) -> MigrationDecision:
    return MigrationDecision(role, 0, "node", "host", 10.0, f"{role} leaks", None)


class _Loop:
    iteration = env_steps = 0


def test_an_actor_is_replaced_during_an_update_and_a_learner_only_once_no_update_is_in_flight(monkeypatch):
    m = Migrator.__new__(Migrator)
    m.stop_reason, m._deferred = None, []
    carried: list[str] = []
    monkeypatch.setattr(m, "_carry_out", lambda d, loop, decided, deferred: carried.append((d.role, deferred)))
    m._carry_out_all([(_decision(r), 1.0) for r in ("learner", "actor", "store")], _Loop(), updating=True)
    assert carried == [("actor", False)] and [(d.role, t) for d, t in m._deferred] == [("learner", 1.0), ("store", 1.0)]
    m._carry_out_all(m._deferred, _Loop(), updating=False, deferred=True)
    assert carried == [("actor", False), ("learner", True), ("store", True)]
