"""MPE simple_spread (N=3, local_ratio 0.5, max_cycles 25): the MAPPO example (one shared policy,
centralised critic) against a uniform random policy, several seeds.

    python benchmarks/simple_spread_bench.py --seeds 1,2,3 --env-steps 30000

An env step is one step of one environment copy (all three agents act); agent steps are three
times as many. Returns follow RLlib's convention: an episode's return is the sum of its agents'
returns (``episode_return_mean``); the mean over agents is that divided by 3. The trained
policy's number is the rolling training return of the run's last ``logging.return_window``
episodes (sampled actions, as in training; evaluation during training of a PettingZoo env is not
built). With ``--eval-episodes K`` each trained run's last checkpoint is also played for K episodes
by ``kilorl eval`` (sampled and greedy actions; a policy per agent plays each agent on its own
policy). The random policy plays ``--random-env-steps`` per seed (200 episodes by default: its
return does not change with the steps it plays). ``--config`` trains another example (the
same with ``-o`` overrides). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "simple_spread_mappo.yaml"
ENV_ID = "mpe2.simple_spread_v3:parallel_env"
ENV_KWARGS = {"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False}


def shared_policy(seed: int, env_steps: int, out_root: Path, config: Path = EXAMPLE,
                  overrides: tuple[str, ...] = (), eval_episodes: int = 0) -> dict:
    run_dir = out_root / f"{config.stem}-s{seed}"
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", str(config), "--seed", str(seed), "--run-dir",
           str(run_dir), "-o", "logging.progress=false", "-o", f"train.total_env_steps={env_steps}",
           *sum((["-o", o] for o in overrides), [])]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed}: kilorl train exited {done.returncode}: {done.stderr[-2000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "episode_return_mean" in r][-1]
    out = {"policy": config.stem, "seed": seed, "env_steps": last["env_steps"], "return": last["episode_return_mean"],
           "agents": {k.split("/", 1)[1]: v for k, v in last.items() if k.startswith("agent_return_mean/")},
           "train_time": last["train_time"], "process_s": time.time() - t0}
    if eval_episodes:
        out["eval"] = evaluated(run_dir, eval_episodes)
    return out


def evaluated(run_dir: Path, episodes: int) -> dict:
    """``kilorl eval`` of the run's last checkpoint: ``episodes`` episodes, sampled actions (as the
    policy was trained) and the mode; each agent on its own policy's part."""
    out = {}
    for mode, flag in (("stochastic", ["--stochastic"]), ("deterministic", [])):
        cmd = [sys.executable, "-m", "kilorl.cli.main", "eval", str(run_dir), "--episodes", str(episodes), "--json",
               *flag]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"kilorl eval {run_dir} exited {done.returncode}: {done.stderr[-2000:]}")
        out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def random_policy(seed: int, env_steps: int, window: int = 20) -> dict:
    from kilorl.envs import make_vector_env

    copies = 8
    envs = make_vector_env(ENV_ID, copies, ENV_KWARGS)
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    t0 = time.time()
    episodes = []
    for _ in range(env_steps // copies):
        envs.step(envs.action_space.sample())
        episodes.extend(envs.take_episodes())
    last = episodes[-window:]
    agents = sorted(last[0].agent_returns)
    return {"policy": "random", "seed": seed, "env_steps": env_steps, "return": statistics.mean(e.total for e in last),
            "agents": {a: statistics.mean(e.agent_returns[a] for e in last) for a in agents},
            "train_time": time.time() - t0, "process_s": time.time() - t0}


def random_on_eval_episodes(episodes: int, seed: int = 1_000_000) -> dict:
    """The uniform random policy on the episodes ``kilorl eval`` plays (episode ``k`` from seed
    ``seed + k``): the same starts as the trained policies' evaluation."""
    from kilorl.envs.factory import make_parallel_env

    returns = []
    for k in range(episodes):
        env = make_parallel_env(ENV_ID, ENV_KWARGS)
        env.reset(seed=seed + k)
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + k * 10 + i)
        total = 0.0
        while env.agents:
            _, rewards, _, _, _ = env.step({a: env.action_space(a).sample() for a in env.agents})
            total += sum(rewards.values())
        returns.append(total)
        env.close()
    return {"episode_return_mean": float(np.mean(returns)), "episode_return_std": float(np.std(returns)),
            "episodes": episodes}


def markdown(results: list[dict]) -> str:
    lines = ["| policy | seed | env steps | episode return (sum of 3 agents, last 20 episodes) | per agent | wall s |",
             "|---|---|---|---|---|---|"]
    for r in results:
        agents = ", ".join(f"{a} {v:.1f}" for a, v in sorted(r["agents"].items()))
        lines.append(f"| {r['policy']} | {r['seed']} | {r['env_steps']} | {r['return']:.1f} | {agents} | "
                     f"{r['train_time']:.0f} |")
    for policy in dict.fromkeys(r["policy"] for r in results):
        values = [r["return"] for r in results if r["policy"] == policy]
        lines.append(f"| {policy}: mean over seeds | | | {np.mean(values):.1f} ± {np.std(values):.1f} | | |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--random-env-steps", type=int, default=5_000,
                        help="env steps of the random policy per seed (its return does not change with steps)")
    parser.add_argument("--out", default="runs/simple_spread_bench")
    parser.add_argument("--skip-training", action="store_true", help="only the random policy")
    parser.add_argument("--config", default=str(EXAMPLE), help="the example to train")
    parser.add_argument("-o", dest="overrides", action="append", default=[], help="override, as kilorl train -o")
    parser.add_argument("--eval-episodes", type=int, default=0,
                        help="kilorl eval of each trained run's last checkpoint, this many episodes (0: none)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    results = [random_policy(s, args.random_env_steps) for s in seeds]
    if args.eval_episodes:
        print(json.dumps({"policy": "random", "eval": random_on_eval_episodes(args.eval_episodes)}), flush=True)
    if not args.skip_training:
        for s in seeds:
            results.append(shared_policy(s, args.env_steps, out, Path(args.config), tuple(args.overrides),
                                         args.eval_episodes))
            print(json.dumps(results[-1]), flush=True)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
