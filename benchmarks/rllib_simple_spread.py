"""RLlib multi-agent PPO on MPE simple_spread (N=3, local_ratio 0.5, max_cycles 25): the peer of
``benchmarks/simple_spread_bench.py``. Runs in a venv of its own (ray[rllib], pettingzoo, mpe2),
not kiloRL's:

    python benchmarks/rllib_simple_spread.py --seed 1 --env-steps 60000 --eval-episodes 100

RLlib's new API stack (RLModule / Learner / EnvRunner), as in RLlib's
``examples/multi_agent/pettingzoo_parameter_sharing.py``: one policy ``p0`` shared by the three
agents (``policy_mapping_fn`` maps every agent to it), the env is PettingZoo's parallel
``mpe2.simple_spread_v3`` behind RLlib's ``ParallelPettingZooEnv``. The critic is RLlib's default
(the agent's own observation, a separate value network), not kiloRL's centralised one.
Hyper-parameters are those of ``examples/simple_spread_mappo.yaml``: gamma 0.99, GAE 0.95, lr
7e-4, 10 epochs, clip 0.2, entropy 0.01, grad clip 10, 64-64 tanh; 800 env steps (2,400 agent
steps) per iteration, minibatches of 600 agent steps.

Steps are env steps (one step of the env, all three agents act), RLlib's
``num_env_steps_sampled_lifetime``, the same unit as kiloRL's ``train.total_env_steps``. The
training return is RLlib's ``episode_return_mean`` over the last 20 episodes (the sum of the
agents' returns, the same convention as kiloRL). With ``--eval-episodes K`` the trained module
plays K episodes from seeds 1,000,000 + k (the starts ``kilorl eval`` uses), sampled and greedy.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

ENV_KWARGS = {"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False}


def make_env(_config=None):
    from mpe2 import simple_spread_v3
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    return ParallelPettingZooEnv(simple_spread_v3.parallel_env(**ENV_KWARGS))


def evaluate(module, episodes: int, seed: int = 1_000_000) -> dict:
    """The module on ``episodes`` episodes, episode k from seed ``seed + k``: sampled and greedy."""
    import torch
    from mpe2 import simple_spread_v3
    from ray.rllib.core.columns import Columns

    out = {}
    for mode in ("stochastic", "deterministic"):
        gen = torch.Generator().manual_seed(seed)
        returns = []
        for k in range(episodes):
            env = simple_spread_v3.parallel_env(**ENV_KWARGS)
            obs, _ = env.reset(seed=seed + k)
            total = 0.0
            while env.agents:
                agents = list(env.agents)
                batch = torch.as_tensor(np.stack([obs[a] for a in agents]), dtype=torch.float32)
                with torch.no_grad():
                    logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
                if mode == "deterministic":
                    actions = logits.argmax(-1)
                else:
                    actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).squeeze(-1)
                obs, rewards, _, _, _ = env.step({a: int(x) for a, x in zip(agents, actions)})
                total += sum(rewards.values())
            returns.append(total)
            env.close()
        out[mode] = {"episode_return_mean": float(np.mean(returns)), "episode_return_std": float(np.std(returns)),
                     "episodes": episodes}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--env-steps", type=int, default=60_000)
    parser.add_argument("--envs", type=int, default=8, help="env copies of the local env runner")
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--vf-clip", type=float, default=1e6,
                        help="RLlib's vf_clip_param (it clips the value loss itself; its default 10 is below "
                             "simple_spread's squared value errors, returns ~-25 per agent)")
    args = parser.parse_args()

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    register_env("simple_spread", make_env)
    rollout = 100
    config = (
        PPOConfig()
        .environment("simple_spread")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=args.envs, rollout_fragment_length=rollout)
        .learners(num_learners=0)
        .multi_agent(policies={"p0"}, policy_mapping_fn=lambda aid, *a, **kw: "p0")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"p0": RLModuleSpec(
            model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False})}))
        .training(gamma=0.99, lambda_=0.95, lr=7e-4, num_epochs=10, clip_param=0.2, entropy_coeff=0.01,
                  grad_clip=10.0, train_batch_size_per_learner=rollout * args.envs,
                  minibatch_size=rollout * args.envs * 3 // 4, vf_loss_coeff=0.5, use_kl_loss=False,
                  vf_clip_param=args.vf_clip)
        .reporting(metrics_num_episodes_for_smoothing=20)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    t0 = time.time()
    steps, result = 0, {}
    while steps < args.env_steps:
        result = algo.train()
        steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
    train_s = time.time() - t0
    out = {"policy": "rllib PPO (shared p0)", "seed": args.seed, "vf_clip": args.vf_clip, "env_steps": int(steps),
           "return": float(result["env_runners"]["episode_return_mean"]),
           "iterations": int(result["training_iteration"]), "train_s": train_s}
    if args.eval_episodes:
        out["eval"] = evaluate(algo.get_module("p0"), args.eval_episodes)
    print(json.dumps(out), flush=True)
    algo.stop()
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
