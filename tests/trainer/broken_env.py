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


class SlowInOneProcess(gym.Env):
    """CartPole whose steps take ``step_s`` seconds in exactly one env runner's process, full speed elsewhere.

    The first process to reset one claims ``marker`` (its pid, written with ``O_EXCL``); its
    envs sleep ``step_s`` a step, every other process's envs do not: one actor slowed on purpose.
    ``spin``: busy-wait instead of sleeping, so that on a machine with fewer cores than processes
    the slowed runner keeps its share of the CPU and the others gain none from its slowness.
    """

    def __init__(self, marker: str, step_s: float = 0.005, spin: bool = False) -> None:
        self.inner = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        self.marker, self.step_s, self.slow, self.spin = marker, step_s, None, spin

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        import os

        if self.slow is None:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
            with open(self.marker) as f:  # the claimer wrote its pid before closing
                owner = f.read()
            self.slow = owner == str(os.getpid())
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        import time

        if self.slow and self.spin:
            until = time.perf_counter() + self.step_s
            while time.perf_counter() < until:
                pass
        elif self.slow:
            time.sleep(self.step_s)
        return self.inner.step(action)


class SlowsItsLearner(gym.Env):
    """CartPole; built inside a learner process, it makes every update of that process take at
    least ``update_s`` seconds longer: a learner slower than its env runners, whatever the machine."""

    def __init__(self, update_s: float = 0.2) -> None:
        self.inner = gym.make("CartPole-v1")
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        with open("/proc/self/cmdline", "rb") as f:
            if b"LearnerProcess" in f.read():
                self._slow_updates(update_s)

    @staticmethod
    def _slow_updates(update_s: float) -> None:
        import time

        from kilorl.roles.learner import LearnerRole

        update = LearnerRole.update
        if getattr(update, "slowed", False):
            return

        def slowed(self, *args, **kwargs):
            time.sleep(update_s)
            return update(self, *args, **kwargs)

        slowed.slowed = True
        LearnerRole.update = slowed

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        return self.inner.step(action)
