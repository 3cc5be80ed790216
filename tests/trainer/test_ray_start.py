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
