"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def _load_scale() -> float:
    """The 1-minute load average per core, at least 1: how much slower than on an idle
    machine a CPU-bound test may run right now."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Hang guards (``@pytest.mark.timeout`` and the ini's ``timeout``) are sized for CI's two
    cores with nothing beside the suite. A test's guard grows with the load when it starts, so
    a busy machine slows a test without failing it, and a hang still fails. Runs before
    pytest-timeout's own wrapper reads the marker."""
    marker = item.get_closest_marker("timeout")
    base = (marker.args[0] if marker is not None and marker.args else
            marker.kwargs.get("timeout") if marker is not None else item.config.getini("timeout"))
    scale = _load_scale()
    if base and scale > 1.0:
        item.add_marker(pytest.mark.timeout(float(base) * scale), append=False)
    yield


@pytest.fixture(scope="session")
def ray_local():
    """One embedded Ray instance for every test that needs the runtime (start-up is ~5 s)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        from kilorl.trainer.ray_start import init_embedded_ray

        init_embedded_ray(num_cpus=6, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def kilorl_cli():
    """Run the ``kilorl`` command in a subprocess; returns CompletedProcess."""
    import subprocess

    def run(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kilorl.cli.main", *args],
            capture_output=True, text=True, timeout=timeout, cwd=cwd or REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    return run


def tiny_config(**sections):
    """A CartPole config small enough to train in seconds; sections override fields."""
    from kilorl.config import config_from_dict

    data = {
        "env": {"id": "CartPole-v1"},
        "algo": {"rollout_length": 32, "num_minibatches": 2, "update_epochs": 4, "lr": 1e-3},
        "parallelism": {"actor": 1, "envs_per_actor": 4},
        "train": {"total_env_steps": 2048, "seed": 3},
        "logging": {"progress": False, "tensorboard": False, "report_every_s": 0.0},
        # small reservations, so test runs fit next to each other on a shared CI machine
        "resources": {"learner": {"gpus": 0, "cpus": 1, "memory_gb": 0.25},
                      "actor": {"cpus": 1, "memory_gb": 0.25},
                      "parameter_server": {"cpus": 0.1, "memory_gb": 0.1}},
    }
    if sections.get("algo", {}).get("name", "ppo") != "ppo":
        data["algo"] = {}  # the defaults above are PPO's fields
    for name, fields in sections.items():
        data.setdefault(name, {}).update(fields)
    return config_from_dict(data)


def fake_rollout(seed: int, T: int = 32, N: int = 4, obs_dim: int = 4, with_moments: bool = False):
    """A CartPole-shaped ``[T, N]`` rollout of random data (PPO's and A2C's records)."""
    import numpy as np

    from kilorl.core import Rollout
    from kilorl.envs.normalization import Moments

    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(T, N, obs_dim)).astype(np.float32)
    steps = {
        "obs": obs,
        "actions": rng.integers(0, 2, size=(T, N)),
        "logp": np.full((T, N), np.log(0.5), np.float32),
        "values": rng.normal(size=(T, N)).astype(np.float32),
        "rewards": rng.normal(size=(T, N)).astype(np.float32),
        "terminated": rng.random((T, N)) < 0.05,
        "truncated": np.zeros((T, N), bool),
    }
    moments = {"obs": [Moments.of(obs, (obs_dim,))]} if with_moments else {}
    return Rollout(steps=steps, last={"values": np.zeros(N, np.float32)}, moments=moments)


@pytest.fixture
def store_worker(tmp_path):
    """A real store worker process (``kilorl store start``), killed at teardown even on failure."""
    from tests.store.store_helpers import WorkerProcess

    w = WorkerProcess(tmp_path, "--shm-size", "256MiB", name="worker").start()
    yield w
    if w.alive():
        w.proc.kill()
        w.proc.wait(10)
    w.remove_arena()
