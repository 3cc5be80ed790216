"""A replay algorithm written against kiloRL's building blocks only: one-step Q-learning on
a ``RingTable`` of transitions with its own adder, a greedy-with-fixed-epsilon policy, and a
Polyak target."""

from __future__ import annotations

import copy
from typing import Literal

import numpy as np
import torch

from kilorl.algos import keys
from kilorl.algos.api import AlgorithmLearner, BehaviourPolicy, ReplaySource
from kilorl.algos.common.optimizer_step import OptimizerStep
from kilorl.algos.common.replay_table import RingTable
from kilorl.algos.common.targets import soft_update
from kilorl.algos.config_base import ReplayConfig
from kilorl.envs.normalization import RunningMeanStd


class TinyQConfig(ReplayConfig):
    name: Literal["tiny_q"] = "tiny_q"
    """Algorithm name."""
    epsilon: float = 0.2
    """Fixed exploration rate."""


class Greedy(BehaviourPolicy):
    def act(self, model, obs, state, ctx):
        rng = np.random.default_rng([self.ctx.run_seed, self.ctx.index, ctx.env_steps])
        greedy = model(obs).argmax(-1).numpy()
        random = rng.integers(0, int(self.ctx.action_space.n), size=len(greedy))
        return torch.from_numpy(np.where(rng.random(len(greedy)) < self.algo_cfg.epsilon, random, greedy)), {}, state


class OneStepTable(ReplaySource):
    def __init__(self, capacity, obs_shape, seed) -> None:
        self.table = RingTable(capacity, {"obs": (obs_shape, np.float32), "action": ((), np.int64),
                                          "reward": ((), np.float32), "next_obs": (obs_shape, np.float32),
                                          "alive": ((), np.float32)}, seed)

    def add(self, rollout) -> None:
        s = rollout.steps
        T, N = rollout.shape
        nxt = np.concatenate([s[keys.OBS][1:], rollout.last[keys.OBS][None]])
        nxt[rollout.final[keys.FINAL_T], rollout.final[keys.FINAL_ENV]] = rollout.final[keys.OBS]
        self.table.insert({"obs": s[keys.OBS].reshape(T * N, -1), "action": s[keys.ACTIONS].reshape(-1),
                           "reward": s[keys.REWARDS].reshape(-1), "next_obs": nxt.reshape(T * N, -1),
                           "alive": 1.0 - s[keys.TERMINATED].reshape(-1).astype(np.float32)})
        self.inserted_env_steps += T * N

    def __len__(self) -> int:
        return len(self.table)

    def sample(self, batch_size):
        return self.table.sample(batch_size)


class TinyQLearner(AlgorithmLearner):
    def __init__(self, algo, ctx) -> None:
        self.algo, self.ctx = algo, ctx
        self.q = ctx.build_model()
        self.target = copy.deepcopy(self.q)
        self.opt = OptimizerStep(self.q, ctx.grad_comm, 1e-3, 10.0)
        self.table = None
        self.updates = 0

    def make_replay_table(self):
        self.table = OneStepTable(self.algo.buffer_size, self.ctx.obs_space.shape, self.ctx.seed)
        return self.table

    def update(self, source, env_steps_total):
        if len(source) < self.algo.learning_starts:
            return {"td_loss": float("nan")}
        b = {k: torch.as_tensor(v) for k, v in source.sample(self.algo.batch_size).items()}
        with torch.no_grad():
            target = b["reward"] + self.algo.gamma * b["alive"] * self.target(b["next_obs"]).max(-1).values
        self.opt.zero_grad()
        q = self.q(b["obs"]).gather(-1, b["action"][:, None]).squeeze(-1)
        loss = torch.nn.functional.mse_loss(q, target)
        loss.backward()
        self.opt.step()
        soft_update(self.target, self.q, 0.05)
        self.updates += 1
        return {"td_loss": float(loss)}

    def weights(self):
        return {keys.MODEL + k: v.detach().numpy() for k, v in self.q.state_dict().items()}

    def state(self):
        rms = RunningMeanStd(self.ctx.obs_space.shape).state()
        return {"model": self.q.state_dict(), "optimizer": self.opt.state_dict(), "obs_rms": rms,
                "ret_rms": RunningMeanStd(()).state(), "updates": self.updates, "torch_rng": torch.get_rng_state()}

    def load_state(self, state) -> None:
        self.q.load_state_dict(state["model"])
