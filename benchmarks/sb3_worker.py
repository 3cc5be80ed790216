"""One Stable-Baselines3 PPO, DQN or SAC run with rl-zoo hyperparameters, stopped at a return threshold.

Run by ``ppo_vs_peers.py`` (PPO), ``dqn_vs_peers.py`` (``--algo dqn``) and ``sac_vs_peers.py``
(``--algo sac``) in its own
subprocess (one run = one process, like kiloRL's ``kilorl train``); writes one JSON
object to ``--out``. Torch is pinned to one thread, as kiloRL's learner is, so neither
side wins by grabbing both cores' BLAS threads.

With ``--eval-every N`` the threshold is on evaluations instead (kiloRL's ``evaluation``
section, what rl-zoo's reported scores are): every N env steps, right after the training
phase that consumed them, ``--eval-episodes`` greedy episodes on an env of their own, episode
k reset with seed ``--eval-seed + k``; their time is left out of ``time_s``.

Usage: ``python benchmarks/sb3_worker.py --env CartPole-v1 --seed 1 --threshold 475
--deadline EPOCH_S --out result.json [--algo dqn] [--eval-every 2560]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from pathlib import Path
from typing import Any


def _threshold_callback(threshold: float, window: int, deadline: float) -> Any:
    """Build the callback lazily so importing this module needs no SB3."""
    from stable_baselines3.common.callbacks import BaseCallback

    class ThresholdCallback(BaseCallback):
        """Stops training when the mean of the last ``window`` finished episodes reaches ``threshold``.

        Episode returns come from Monitor's ``info["episode"]["r"]`` (what SB3's own
        ``ep_info_buffer`` holds). The buffer itself cannot be read in ``_on_step``: SB3
        calls ``on_step`` before ``_update_info_buffer`` for the same env step, so this
        keeps its own window and checks at each rollout end that it equals SB3's.
        """

        def __init__(self) -> None:
            super().__init__()
            self.returns: deque[float] = deque(maxlen=window)
            self.episodes = 0
            self.train_start: float | None = None
            self.reached: dict[str, float] | None = None
            self.stop_reason = "step_limit"

        def _on_training_start(self) -> None:
            self.train_start = time.time()

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                episode = info.get("episode")
                if episode is not None:
                    self.returns.append(float(episode["r"]))
                    self.episodes += 1
            now = time.time()
            if len(self.returns) == window and sum(self.returns) / window >= threshold:
                self.reached = {"env_steps": int(self.num_timesteps), "at": now,
                                "return_mean": sum(self.returns) / window}
                self.stop_reason = "threshold"
                return False
            if now >= deadline:
                self.stop_reason = "budget"
                return False
            return True

        def _on_rollout_end(self) -> None:
            sb3_window = [float(e["r"]) for e in self.model.ep_info_buffer]
            if sb3_window != list(self.returns):
                raise RuntimeError(f"return window diverged from SB3's ep_info_buffer: "
                                   f"{list(self.returns)} != {sb3_window}")

    return ThresholdCallback()


def greedy_returns(model: Any, env_id: str, episodes: int, seed: int) -> list[float]:
    """``episodes`` deterministic episodes on a fresh env, episode k reset with ``seed + k``
    (the seeds kiloRL's evaluation uses)."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def _eval_callback(env_id: str, threshold: float, every: int, episodes: int, seed: int, deadline: float) -> Any:
    """Stops training at the first evaluation whose mean reaches ``threshold``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class EvalThresholdCallback(BaseCallback):
        """Evaluates at the start of the first rollout past each multiple of ``every`` env
        steps: SB3 trains at the end of a rollout, so the policy evaluated has trained on
        every step so far, as kiloRL's (evaluated after the update) has."""

        def __init__(self) -> None:
            super().__init__()
            self.next_due, self.eval_s = every, 0.0
            self.train_start: float | None = None
            self.reached: dict[str, float] | None = None
            self.evaluations: list[tuple[int, float]] = []
            self.stop_reason = "step_limit"
            self.returns: deque[float] = deque(maxlen=20)
            self.episodes = 0

        def _on_training_start(self) -> None:
            self.train_start = time.time()

        def _on_training_end(self) -> None:
            # learn() returns after its last update without starting another rollout: an
            # evaluation due at the last step (100k of 100k) happens here
            self._on_rollout_start()

        def _on_rollout_start(self) -> None:
            if self.num_timesteps < self.next_due or self.reached is not None:
                return
            while self.next_due <= self.num_timesteps:
                self.next_due += every
            t0 = time.time()
            mean = sum(greedy_returns(self.model, env_id, episodes, seed)) / episodes
            self.eval_s += time.time() - t0
            self.evaluations.append((int(self.num_timesteps), mean))
            if mean >= threshold:
                self.reached = {"env_steps": int(self.num_timesteps), "at": time.time() - self.eval_s,
                                "return_mean": mean}
                self.stop_reason = "threshold"

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if info.get("episode") is not None:
                    self.returns.append(float(info["episode"]["r"]))
                    self.episodes += 1
            if self.reached is not None:
                return False
            if time.time() >= deadline:
                self.stop_reason = "budget"
                return False
            return True

    return EvalThresholdCallback()


def _env_maker(env_id: str) -> Any:
    """A Gymnasium id as it is, or a ``module:Class`` entry point made with its 500-step limit
    (kiloRL's own factory, so both sides step the same environment)."""
    if ":" not in env_id:
        return env_id
    from kilorl.envs import make_env

    return lambda: make_env(env_id, None, 500)


def run(env_id: str, seed: int, threshold: float, window: int, deadline: float, algo: str = "ppo",
        eval_every: int | None = None, eval_episodes: int = 10, eval_seed: int = 2_000_000,
        total_steps: int | None = None) -> dict[str, Any]:
    """Train until the threshold, the deadline or rl-zoo's n_timesteps (``total_steps`` when
    given); return the measurements."""
    import torch

    torch.set_num_threads(1)
    from stable_baselines3 import DQN, PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from zoo_hyperparams import ZOO_DQN, ZOO_PPO, ZOO_PPO_LSTM, ZOO_SAC, resolve_schedules

    entry = {"dqn": ZOO_DQN, "ppo": ZOO_PPO, "ppo_lstm": ZOO_PPO_LSTM, "sac": ZOO_SAC}[algo][env_id]
    t_entry = time.time()
    # make_vec_env wraps every env in Monitor (episode returns before any normalization).
    env = make_vec_env(_env_maker(env_id), n_envs=entry.n_envs, seed=seed)
    if entry.normalize:
        env = VecNormalize(env, gamma=entry.algo_kwargs.get("gamma", 0.99), **entry.normalize_kwargs)
    policy_kwargs = dict(entry.policy_kwargs)
    if policy_kwargs.get("activation_fn") == "relu":
        policy_kwargs["activation_fn"] = torch.nn.ReLU
    if algo == "ppo_lstm":
        from sb3_contrib import RecurrentPPO

        cls, policy = RecurrentPPO, "MlpLstmPolicy"
    else:
        cls, policy = {"dqn": DQN, "sac": SAC}.get(algo, PPO), "MlpPolicy"
    model = cls(policy, env, seed=seed, device="cpu", verbose=0, stats_window_size=window,
                policy_kwargs=policy_kwargs or None, **resolve_schedules(entry.algo_kwargs))
    callback = (_eval_callback(env_id, threshold, eval_every, eval_episodes, eval_seed, deadline) if eval_every
                else _threshold_callback(threshold, window, deadline))
    model.learn(total_timesteps=total_steps or entry.n_timesteps, callback=callback)
    end = time.time()
    env.close()
    result: dict[str, Any] = {
        "reached": callback.reached is not None,
        "stop_reason": callback.stop_reason,
        "startup_s": (callback.train_start or end) - t_entry,
        "env_steps_total": int(model.num_timesteps),
        "episodes": callback.episodes,
        "final_return_mean": sum(callback.returns) / len(callback.returns) if callback.returns else None,
        "torch_threads": torch.get_num_threads(),
        "zoo_entry": entry.zoo_key,
        "algo": algo,
    }
    if eval_every:
        result.update(rule="eval", evaluations=callback.evaluations, eval_s=callback.eval_s)
    if callback.reached is not None:
        result["env_steps"] = callback.reached["env_steps"]
        result["time_s"] = callback.reached["at"] - callback.train_start
        result["time_incl_startup_s"] = callback.reached["at"] - t_entry
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True, help="Gymnasium id with an rl-zoo entry (for --algo) in zoo_hyperparams")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--threshold", type=float, required=True)
    p.add_argument("--window", type=int, default=20, help="episodes in the rolling mean")
    p.add_argument("--deadline", type=float, required=True, help="absolute time.time() to give up at")
    p.add_argument("--out", type=Path, required=True, help="JSON result file")
    p.add_argument("--algo", choices=("ppo", "dqn", "ppo_lstm", "sac"), default="ppo", help="SB3 algorithm (its rl-zoo entry)")
    p.add_argument("--eval-every", type=int,
                   help="threshold on greedy evaluations every N env steps (default: on training episodes)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-seed", type=int, default=2_000_000, help="seed of each evaluation's first episode (kiloRL's default)")
    p.add_argument("--total-steps", type=int, help="train this many env steps instead of the rl-zoo entry's n_timesteps")
    args = p.parse_args()
    result = run(args.env, args.seed, args.threshold, args.window, args.deadline, args.algo,
                 args.eval_every, args.eval_episodes, args.eval_seed, args.total_steps)
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
