"""BenchMARL's MAPPO on the simple_spread kiloRL trains (mpe2 ``simple_spread_v3``, N=3,
local_ratio 0.5, max_cycles 25, discrete actions), with examples/simple_spread_mappo.yaml's
hyper-parameters, for the peer column of docs/benchmarks.md ("Issue 35").

BenchMARL is not a kiloRL dependency: run this with a venv of its own, e.g.

    python3.11 -m venv /tmp/benchmarl && /tmp/benchmarl/bin/pip install -c constraints.txt torch==2.13.0 benchmarl mpe2
    /tmp/benchmarl/bin/python benchmarks/benchmarl_simple_spread.py --seed 1 --frames 60000

TorchRL's PettingZoo wrapper still looks the MPE tasks up in ``pettingzoo.mpe``, which PettingZoo
1.25 moved out to the ``mpe2`` package; the script hands it mpe2's module under that name, so
both frameworks step the same environment code. A BenchMARL frame is one step of one
environment (all agents), kiloRL's env step. BenchMARL reports an episode's reward as the mean
over the agents; the table's number is that times N (the sum, kiloRL's ``episode_return_mean``).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

N = 3


def _mpe_under_its_old_name() -> None:
    """``pettingzoo.mpe.all_modules.mpe_environments`` from mpe2, for TorchRL's lookup."""
    import mpe2.simple_spread_v3 as spread

    module = types.ModuleType("pettingzoo.mpe.all_modules")
    module.mpe_environments = {"mpe/simple_spread_v3": spread}  # type: ignore[attr-defined]
    sys.modules["pettingzoo.mpe.all_modules"] = module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--frames", type=int, default=60_000)
    parser.add_argument("--eval-episodes", type=int, default=100)
    args = parser.parse_args()
    _mpe_under_its_old_name()
    import torch
    from benchmarl.algorithms import MappoConfig
    from benchmarl.environments import PettingZooTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    task = PettingZooTask.SIMPLE_SPREAD.get_from_yaml()
    task.config.update({"N": N, "local_ratio": 0.5, "max_cycles": 25})
    cfg = ExperimentConfig.get_from_yaml()
    batch = 800  # 100 steps x 8 environments, as the kiloRL example
    cfg.max_n_frames = args.frames
    cfg.on_policy_collected_frames_per_batch = batch
    cfg.on_policy_n_envs_per_worker = 8
    cfg.on_policy_minibatch_size = batch // 4
    cfg.on_policy_n_minibatch_iters = 10 * 4  # 10 epochs of 4 minibatches
    cfg.lr, cfg.gamma, cfg.clip_grad_val = 7e-4, 0.99, 10.0
    cfg.prefer_continuous_actions = False
    cfg.share_policy_params = True
    cfg.evaluation, cfg.evaluation_interval, cfg.evaluation_episodes = True, args.frames, args.eval_episodes
    cfg.evaluation_deterministic_actions = False
    cfg.loggers, cfg.create_json, cfg.render, cfg.checkpoint_interval = [], True, False, 0
    cfg.save_folder = tempfile.mkdtemp(prefix="benchmarl-")
    algo = MappoConfig.get_from_yaml()
    algo.entropy_coef, algo.clip_epsilon, algo.lmbda = 0.01, 0.2, 0.95
    model = MlpConfig.get_from_yaml()
    model.num_cells, model.activation_class = [64, 64], torch.nn.Tanh
    t0 = time.time()
    experiment = Experiment(task=task, algorithm_config=algo, model_config=model, critic_model_config=model,
                            seed=args.seed, config=cfg)
    experiment.run()
    wall = time.time() - t0
    found = sorted(Path(cfg.save_folder).rglob("*.json"))
    data = json.loads(found[-1].read_text())
    runs = next(iter(next(iter(data.values())).values()))  # environment -> task -> algorithm -> seed
    last = runs[max(runs, key=lambda k: len(k))] if isinstance(runs, dict) else runs
    print(json.dumps({"peer": "benchmarl mappo", "seed": args.seed, "frames": args.frames, "wall_s": wall,
                      "json": str(found[-1]), "raw": last if len(json.dumps(last)) < 4000 else "see json"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
