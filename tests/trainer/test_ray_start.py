"""An embedded Ray start that runs out of Ray's fixed 30 s window is started again; nothing else is.

Ray's window cannot be made to run out on demand, so ``ray.init`` is replaced by one that
raises what Ray raises (its text, its type) a given number of times."""

from __future__ import annotations

import pytest

from kilorl.trainer.ray_start import init_embedded_ray

RAY_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet "
               "failed to startup or the GCS has become overloaded.")


@pytest.fixture
def fake_init(monkeypatch):
    import ray

    calls = {"init": 0, "shutdown": 0, "fail": 0, "error": RAY_TIMEOUT}

    def init(**kwargs):
        calls["init"] += 1
        if calls["init"] <= calls["fail"]:
            raise Exception(calls["error"])  # Ray raises a bare Exception here

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1))
    return calls


def test_a_start_that_timed_out_is_shut_down_and_started_again(fake_init):
    fake_init["fail"] = 2
    init_embedded_ray(attempts=3, num_cpus=1)
    assert (fake_init["init"], fake_init["shutdown"]) == (3, 2)


def test_the_last_attempts_timeout_is_raised(fake_init):
    fake_init["fail"] = 3
    with pytest.raises(Exception, match="timed out during startup"):
        init_embedded_ray(attempts=3)
    assert fake_init["init"] == 3


def test_any_other_start_failure_is_raised_at_once(fake_init):
    fake_init["fail"], fake_init["error"] = 1, "invalid resource request"
    with pytest.raises(Exception, match="invalid resource request"):
        init_embedded_ray(attempts=3)
    assert (fake_init["init"], fake_init["shutdown"]) == (1, 0)


class _FakeCluster:
    """Stands in for ``ray.cluster_utils.Cluster``: each ``add_node`` spawns a real process
    (what a raylet is), and the node numbers in ``fail_at`` raise Ray's start-up timeout after
    spawning it, as a raylet that started but never registered does."""

    fail_at: set[int] = set()
    error = RAY_TIMEOUT
    made: list[_FakeCluster] = []
    spawned: list = []

    def __init__(self, initialize_head: bool = False) -> None:
        assert initialize_head is False  # the head is added in the try block, so its processes can be ended
        self.nodes: list[dict] = []
        self.shut_down = False
        _FakeCluster.made.append(self)

    def add_node(self, **args):
        import subprocess

        _FakeCluster.spawned.append(subprocess.Popen(["sleep", "600"]))
        if len(_FakeCluster.spawned) in _FakeCluster.fail_at:
            raise Exception(_FakeCluster.error)
        self.nodes.append(args)

    def wait_for_nodes(self) -> None:
        pass

    def shutdown(self) -> None:
        self.shut_down = True


@pytest.fixture
def fake_cluster(monkeypatch):
    import ray.cluster_utils

    _FakeCluster.fail_at, _FakeCluster.error, _FakeCluster.made, _FakeCluster.spawned = set(), RAY_TIMEOUT, [], []
    monkeypatch.setattr(ray.cluster_utils, "Cluster", _FakeCluster)
    yield _FakeCluster
    for p in _FakeCluster.spawned:
        p.kill()


def test_a_local_cluster_whose_raylet_timed_out_is_ended_and_started_again_leaving_no_processes(fake_cluster):
    from kilorl.trainer.ray_start import start_local_cluster

    fake_cluster.fail_at = {2}  # the first attempt's second raylet
    cluster = start_local_cluster({"num_cpus": 0}, [{"num_cpus": 1}, {"num_cpus": 2}])
    assert cluster is fake_cluster.made[1] and cluster.nodes == [{"num_cpus": 0}, {"num_cpus": 1}, {"num_cpus": 2}]
    first = fake_cluster.made[0]
    assert first.shut_down and [p.poll() is not None for p in fake_cluster.spawned] == [True, True, False, False, False]


def test_any_other_cluster_start_failure_is_raised_at_once_and_leaves_no_processes(fake_cluster):
    from kilorl.trainer.ray_start import start_local_cluster

    fake_cluster.fail_at, fake_cluster.error = {1}, "invalid resource request"
    with pytest.raises(Exception, match="invalid resource request"):
        start_local_cluster({"num_cpus": 0}, [{"num_cpus": 1}])
    assert len(fake_cluster.made) == 1 and all(p.poll() is not None for p in fake_cluster.spawned)
