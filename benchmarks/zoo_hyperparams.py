"""rl-baselines3-zoo PPO, DQN and SAC hyperparameters for the envs the peer benchmarks run.

Copied from DLR-RM/rl-baselines3-zoo ``hyperparams/ppo.yml`` at commit
208b6fdf3a9aa24de44b2e068c6e5f6a07d97fcc (https://github.com/DLR-RM/rl-baselines3-zoo/blob/
208b6fdf3a9aa24de44b2e068c6e5f6a07d97fcc/hyperparams/ppo.yml):

    CartPole-v1:              # "# Tuned"
      n_envs: 8
      n_timesteps: !!float 1e5
      policy: 'MlpPolicy'
      n_steps: 32
      batch_size: 256
      gae_lambda: 0.8
      gamma: 0.98
      n_epochs: 20
      ent_coef: 0.0
      learning_rate: lin_0.001
      clip_range: lin_0.2

    LunarLander-v2:
      n_envs: 16
      n_timesteps: !!float 1e6
      policy: 'MlpPolicy'
      n_steps: 1024
      batch_size: 64
      gae_lambda: 0.98
      gamma: 0.999
      n_epochs: 4
      ent_coef: 0.01

Neither entry sets ``normalize`` (so no VecNormalize) nor ``policy_kwargs`` (so SB3's
MlpPolicy defaults: separate 64-64 tanh pi/vf networks, orthogonal init); unset keys
take SB3's PPO defaults (learning_rate 3e-4, clip_range 0.2, vf_coef 0.5,
max_grad_norm 0.5). The zoo's LunarLander entry is still keyed ``-v2`` at that commit;
Gymnasium 1.x only ships ``LunarLander-v3`` (same task, v2's bug fixes), so the
benchmark applies the entry to v3. ``lin_X`` is the zoo's ``linear_schedule(X)``:
``progress_remaining * X``, where SB3's progress_remaining falls from 1 to 0 over
``n_timesteps``; the schedules are therefore only faithful when ``learn`` is called
with ``total_timesteps = n_timesteps``, which is what the benchmark does.

DQN: ``hyperparams/dqn.yml`` at commit ce95481b041fe5314c1b2f1a53940d169b9253fc
(https://github.com/DLR-RM/rl-baselines3-zoo/blob/ce95481b041fe5314c1b2f1a53940d169b9253fc/
hyperparams/dqn.yml), the entry ``examples/cartpole_dqn.yaml`` copies:

    CartPole-v1:              # "# Almost Tuned"
      n_timesteps: !!float 5e4
      policy: 'MlpPolicy'
      learning_rate: !!float 2.3e-3
      batch_size: 64
      buffer_size: 100000
      learning_starts: 1000
      gamma: 0.99
      target_update_interval: 10
      train_freq: 256
      gradient_steps: 128
      exploration_fraction: 0.16
      exploration_final_eps: 0.04
      policy_kwargs: "dict(net_arch=[256, 256])"

SAC: ``hyperparams/sac.yml`` at commit 00128b5d46d497b772f3bd891ae9f520919e8971
(https://github.com/DLR-RM/rl-baselines3-zoo/blob/00128b5d46d497b772f3bd891ae9f520919e8971/
hyperparams/sac.yml), the entry ``examples/pendulum_sac.yaml`` copies:

    Pendulum-v1:
      n_timesteps: 20000
      policy: 'MlpPolicy'
      learning_rate: !!float 1e-3

    HalfCheetah-v3: &mujoco-defaults
      n_timesteps: !!float 1e6
      policy: 'MlpPolicy'
      learning_starts: 10000
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ZOO_COMMIT = "208b6fdf3a9aa24de44b2e068c6e5f6a07d97fcc"
ZOO_SOURCE = f"https://github.com/DLR-RM/rl-baselines3-zoo/blob/{ZOO_COMMIT}/hyperparams/ppo.yml"
ZOO_DQN_COMMIT = "ce95481b041fe5314c1b2f1a53940d169b9253fc"
ZOO_SAC_COMMIT = "00128b5d46d497b772f3bd891ae9f520919e8971"
ZOO_SAC_SOURCE = f"https://github.com/DLR-RM/rl-baselines3-zoo/blob/{ZOO_SAC_COMMIT}/hyperparams/sac.yml"
ZOO_DQN_SOURCE = f"https://github.com/DLR-RM/rl-baselines3-zoo/blob/{ZOO_DQN_COMMIT}/hyperparams/dqn.yml"


@dataclass(frozen=True)
class ZooEntry:
    """One env's rl-zoo entry, split the way rl-zoo's ExperimentManager splits it."""

    zoo_key: str
    """The key of the entry in ppo.yml (may name an older env version)."""
    n_envs: int
    """Parallel envs in the DummyVecEnv (rl-zoo's default vec env type)."""
    n_timesteps: int
    """Training length; also the horizon of the linear schedules."""
    algo_kwargs: dict[str, Any]
    """Keyword arguments for the SB3 algorithm class (``lin_X`` kept as strings)."""
    normalize: bool = False
    """Wrap the vec env in VecNormalize (rl-zoo passes gamma to it)."""
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    """``policy_kwargs`` of the entry (empty: SB3 defaults)."""
    normalize_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of VecNormalize (rl-zoo's ``normalize_kwargs``)."""


ZOO_PPO: dict[str, ZooEntry] = {
    "CartPole-v1": ZooEntry(
        zoo_key="CartPole-v1",
        n_envs=8,
        n_timesteps=100_000,
        algo_kwargs=dict(
            n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
            learning_rate="lin_0.001", clip_range="lin_0.2",
        ),
    ),
    "LunarLander-v3": ZooEntry(
        zoo_key="LunarLander-v2",
        n_envs=16,
        n_timesteps=1_000_000,
        algo_kwargs=dict(n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01),
    ),
}


ZOO_DQN: dict[str, ZooEntry] = {
    # hyperparams/dqn.yml at ZOO_DQN_COMMIT ("# Almost Tuned"); n_envs unset: rl-zoo's 1.
    "CartPole-v1": ZooEntry(
        zoo_key="CartPole-v1",
        n_envs=1,
        n_timesteps=50_000,
        algo_kwargs=dict(
            learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
            target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
            exploration_final_eps=0.04,
        ),
        policy_kwargs=dict(net_arch=[256, 256]),
    ),
}
"""rl-zoo's DQN entries; unset keys take SB3's DQN defaults (tau 1, max_grad_norm 10,
exploration_initial_eps 1, Huber loss, no double Q-learning)."""


ZOO_SAC: dict[str, ZooEntry] = {
    # hyperparams/sac.yml at ZOO_SAC_COMMIT; n_envs unset: rl-zoo's 1.
    "Pendulum-v1": ZooEntry(zoo_key="Pendulum-v1", n_envs=1, n_timesteps=20_000,
                            algo_kwargs=dict(learning_rate=1e-3)),
    # HalfCheetah-v3 is rl-zoo's key (its MuJoCo defaults: 1e6 steps, learning_starts 10000); v5 is
    # the same task on the maintained MuJoCo bindings.
    "HalfCheetah-v5": ZooEntry(zoo_key="HalfCheetah-v3", n_envs=1, n_timesteps=1_000_000,
                               algo_kwargs=dict(learning_starts=10_000)),
}
"""rl-zoo's SAC entries; unset keys take SB3's SAC defaults (buffer 1e6, batch 256,
learning_starts 100, tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1, ent_coef auto,
net_arch [256, 256] ReLU)."""


def linear_schedule(initial_value: float) -> Callable[[float], float]:
    """rl-zoo's ``linear_schedule``: the value times SB3's progress_remaining (1 -> 0)."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial_value

    return schedule


def resolve_schedules(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turn rl-zoo's ``lin_X`` strings into schedules, as rl-zoo's hyperparameter parser does."""
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if isinstance(value, str) and value.startswith("lin_"):
            out[key] = linear_schedule(float(value.removeprefix("lin_")))
        else:
            out[key] = value
    return out


ZOO_PPO_LSTM_SOURCE = "https://huggingface.co/sb3/ppo_lstm-CartPoleNoVel-v1 (rl-zoo's hyperparams/ppo_lstm.yml)"
ZOO_PPO_LSTM: dict[str, ZooEntry] = {
    # rl-zoo's ``ppo_lstm`` CartPoleNoVel-v1 entry (SB3-contrib's RecurrentPPO, MlpLstmPolicy), as the
    # sb3/ppo_lstm-CartPoleNoVel-v1 model card lists it (500 +/- 0 over 10 deterministic episodes). rl-zoo's
    # CartPoleNoVel is CartPole with the velocities removed and a 500-step limit; kiloRL's
    # ``kilorl.envs.memory:CartPoleNoVelocity`` zeroes them instead (the same information), and both
    # sides train on it here. ``activation_fn`` is named ("relu"); the worker resolves it.
    "kilorl.envs.memory:CartPoleNoVelocity": ZooEntry(
        zoo_key="CartPoleNoVel-v1",
        n_envs=8,
        n_timesteps=100_000,
        algo_kwargs=dict(
            n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
            learning_rate="lin_0.001", clip_range="lin_0.2",
        ),
        normalize=True,
        normalize_kwargs=dict(norm_obs=True, norm_reward=False),
        policy_kwargs=dict(ortho_init=False, activation_fn="relu", lstm_hidden_size=64, enable_critic_lstm=True,
                           net_arch=dict(pi=[64], vf=[64])),
    ),
}
