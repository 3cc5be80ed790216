"""Agent steps per second of one env runner and one learner with 1, 8, 64 and 200 agents on one
shared PPO policy (docs/benchmarks.md, "Issue 35").

    python benchmarks/agent_scale_bench.py --agents 1,8,64,200 --columns 800

The environment is a PettingZoo ``ParallelEnv`` of ``n`` agents whose dynamics cost almost
nothing (each agent's 18 observation entries drift by its action; reward minus the distance
to the origin; episodes of 25 steps), so the numbers are kiloRL's own cost per agent step:
the agent-column adapter, the policy's forward pass, the step record and PPO's update. Every
configuration steps about ``--columns`` agent columns (``copies = columns // n``) for
``--rollouts`` rollouts of 25 steps, in this process (no Ray), one after another.
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

OBS, ACTIONS, LENGTH = 18, 5, 25
MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], np.float32) * 0.1


class Drift(ParallelEnv):
    """``n`` agents drifting on a plane (see the module docstring)."""

    metadata = {"name": "drift_v0", "render_modes": []}

    def __init__(self, n: int = 8) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.agents: list[str] = []
        self.rng = np.random.default_rng(0)

    @functools.cache  # noqa: B019 - one space object per agent, as PettingZoo asks
    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(ACTIONS)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        self.obs = self.rng.normal(size=(len(self.agents), OBS)).astype(np.float32)
        return dict(zip(self.agents, self.obs)), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        moves = MOVES[np.fromiter((actions[a] for a in self.agents), np.int64, len(self.agents))]
        self.obs[:, :2] += moves
        reward = -np.linalg.norm(self.obs[:, :2], axis=1)
        done = self.t >= LENGTH
        agents = self.agents
        out = (dict(zip(agents, self.obs)), dict(zip(agents, reward.tolist())), dict.fromkeys(agents, False),
               dict.fromkeys(agents, done), {a: {} for a in agents})
        if done:
            self.agents = []
        return out


def parallel_env(n: int = 8) -> Drift:
    return Drift(n)


def roles(n: int, copies: int, **algo: Any) -> tuple[Any, Any]:
    """A PPO learner (version 0 published) and an env runner on ``copies`` Drift envs of ``n`` agents."""
    from kilorl.config import config_from_dict
    from kilorl.roles.env_runner import EnvRunner
    from kilorl.roles.learner import LearnerRole
    from kilorl.roles.parameter_store import InMemoryParameterStore

    cfg = config_from_dict({
        "env": {"id": "agent_scale_bench:parallel_env", "kwargs": {"n": n}},
        "algo": {"rollout_length": LENGTH, "num_minibatches": 1, "update_epochs": 4, **algo},
        "parallelism": {"actor": 1, "envs_per_actor": copies},
        "train": {"total_env_steps": 10**9, "torch_threads": 1},
        "logging": {"progress": False, "tensorboard": False},
    })
    store = InMemoryParameterStore()
    learner = LearnerRole(cfg, store)
    learner.publish(0)
    return learner, EnvRunner(cfg, store, 0, seed=1)


def learning_check(n: int, copies: int, iterations: int) -> tuple[float, float]:
    """Mean reward per live agent step of the first and the last rollout of ``iterations`` PPO
    updates on Drift (reward: minus the distance to the origin): a shared policy that learns
    moves every agent inward."""
    learner, runner = roles(n, copies, lr=3e-3)
    means = []
    for i in range(iterations):
        rollout, info = runner.collect(i)
        alive = rollout.steps["alive"]
        means.append(float(rollout.steps["rewards"][alive].mean()))
        learner.update(i + 1, (i + 1) * info["env_steps"], rollout)
    return means[0], means[-1]


def measure(n: int, columns: int, rollouts: int) -> dict[str, float]:
    copies = max(1, columns // n)
    learner, runner = roles(n, copies)
    runner.collect(0)  # warm-up
    collect_s = update_s = 0.0
    agent_steps = 0
    for i in range(rollouts):
        t0 = time.perf_counter()
        rollout, info = runner.collect(i)
        t1 = time.perf_counter()
        learner.update(i + 1, (i + 1) * info["env_steps"], rollout)
        update_s += time.perf_counter() - t1
        collect_s += t1 - t0
        agent_steps += int(rollout.steps["alive"].sum())
    return {"agents": n, "copies": copies, "columns": copies * n, "agent_steps": agent_steps,
            "collect_agent_sps": agent_steps / collect_s, "total_agent_sps": agent_steps / (collect_s + update_s),
            "collect_s": collect_s, "update_s": update_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1,8,64,200")
    parser.add_argument("--columns", type=int, default=800)
    parser.add_argument("--rollouts", type=int, default=5)
    parser.add_argument("--learning-check", type=int, default=0, metavar="ITERATIONS",
                        help="instead: train 8 agents x 4 copies this many iterations, print first/last reward")
    args = parser.parse_args()
    if args.learning_check:
        first, last = learning_check(8, 4, args.learning_check)
        print(f"mean reward per agent step: first rollout {first:.3f}, after {args.learning_check} updates {last:.3f}")
        return 0
    print("| agents | copies | columns | agent steps | collect: agent steps/s | collect + PPO update: agent steps/s |")
    print("|---|---|---|---|---|---|")
    for n in (int(a) for a in args.agents.split(",")):
        r = measure(n, args.columns, args.rollouts)
        print(f"| {r['agents']} | {r['copies']} | {r['columns']} | {r['agent_steps']} | {r['collect_agent_sps']:.0f} | "
              f"{r['total_agent_sps']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
