"""An on-policy algorithm with a stateful behaviour policy: it counts each episode's steps in
its state, records the count as an int64 extra, and the learner checks the record against
the state at rollout start before one advantage actor-critic step."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from kilorl.algos.actor_critic import ActorCriticLearner, ActorCriticPolicy, ActorCriticState
from kilorl.algos.api import Extra
from kilorl.algos.config_base import OnPolicyConfig
from kilorl.algos.gae import rollout_gae


class CountingPGConfig(OnPolicyConfig):
    name: Literal["counting_pg"] = "counting_pg"
    """Algorithm name."""


class CountingPolicy(ActorCriticPolicy):
    with_logp = False

    def __init__(self, algo_cfg, ctx) -> None:
        super().__init__(algo_cfg, ctx)
        self.extras = {**self.extras, "episode_step": Extra((), "int64")}

    def initial_state(self, n_envs):
        return {"steps": np.zeros(n_envs, np.int64)}

    def act(self, model, obs, state, ctx):
        actions, extras, _ = super().act(model, obs, state, ctx)
        extras["episode_step"] = state["steps"].copy()
        return actions, extras, {"steps": state["steps"] + 1}


class CountingPGLearner(ActorCriticLearner):
    def __init__(self, algo, ctx) -> None:
        self.algo, self.ac = algo, ActorCriticState(algo, ctx)

    def update(self, source, env_steps_total):
        rollout = source.rollout()
        steps = rollout.steps
        counted = steps["episode_step"]
        done = steps["terminated"] | steps["truncated"]
        expect = rollout.state["steps"].copy()
        for t in range(counted.shape[0]):  # the state at rollout start, carried and reset where episodes ended
            if not np.array_equal(counted[t], expect):
                raise AssertionError(f"episode_step at t={t} is {counted[t]}, the state says {expect}")
            expect = np.where(done[t], 0, expect + 1)
        adv, ret = rollout_gae(rollout, self.algo.gamma, self.algo.gae_lambda)
        ac = self.ac
        obs, actions = ac.observations(steps["obs"]), ac.tensor(steps["actions"])
        ac.optimizer.zero_grad(set_to_none=True)
        logp, _, values = ac.module.evaluate_actions(obs, actions)
        a = torch.as_tensor(adv.reshape(-1))
        loss = -(ac.normalized(a) * logp).mean() + 0.5 * ((torch.as_tensor(ret.reshape(-1)) - values) ** 2).mean()
        loss.backward()
        ac.step()
        ac.updates += 1
        return {"state_checked_steps": float(counted.size), "loss": float(loss)}
