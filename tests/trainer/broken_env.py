"""An environment that fails in ``reset``: start-up failure tests point ``env.id`` here."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class ResetRaises(gym.Env):
    """CartPole-shaped spaces; ``reset`` raises (the learner's probe never resets, the actor does)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise RuntimeError("this env refuses to reset")

    def step(self, action):
        raise AssertionError("never reached")


class DiesOnce(gym.Env):
    """CartPole whose process is SIGKILLed at its ``die_at``-th step, once per ``marker`` file.

    The first env to reach that step creates ``marker`` and kills its own process (as
    ``kill -9`` would, mid-rollout); every later process finds the marker and lives.
    """

    def __init__(self, marker: str, die_at: int = 40) -> None:
        self.inner = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        self.marker, self.die_at, self.steps = marker, die_at, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        import os
        import signal

        self.steps += 1
        if self.steps == self.die_at:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.step(action)


class SlowCartPole(gym.Env):
    """CartPole whose every step takes at least ``step_s`` seconds: a run lasts long enough for a mid-run event."""

    def __init__(self, step_s: float = 0.001) -> None:
        self.inner = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        self.step_s = step_s

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        import time

        time.sleep(self.step_s)
        return self.inner.step(action)


class KillsItsLearner(gym.Env):
    """CartPole; built inside a learner process (``ray::LearnerProcess`` in its title), it SIGKILLs
    that process, every time: a learner that dies on each restore. It dies once the run directory
    ``once_checkpointed`` holds a checkpoint newer than the newest it found when it was built (so
    each learner starts, trains and has a checkpoint to restore, however slow the machine), or
    ``after_s`` seconds after it was built."""

    def __init__(self, after_s: float = 8.0, once_checkpointed: str | None = None) -> None:
        import threading

        self.inner = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        with open("/proc/self/cmdline", "rb") as f:
            in_learner = b"LearnerProcess" in f.read()
        if in_learner and once_checkpointed is None:
            threading.Timer(after_s, self._die).start()
        elif in_learner:
            threading.Thread(target=self._die_once_checkpointed, args=(once_checkpointed,), daemon=True).start()

    @classmethod
    def _die_once_checkpointed(cls, run_dir: str) -> None:
        import time
        from pathlib import Path

        root = Path(run_dir) / "checkpoints"

        def newest() -> str:
            return max((p.name for p in root.iterdir() if p.name.startswith("step_")), default="") if root.is_dir() else ""

        started_from = newest()
        while newest() <= started_from:  # a condition, polled: no time window to miss
            time.sleep(0.05)
        cls._die()

    @staticmethod
    def _die() -> None:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        return self.inner.step(action)
