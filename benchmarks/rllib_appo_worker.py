"""RLlib APPO for ``throughput_bench.py``, run with RLlib's own Python (``--rllib-python``, a venv with
``ray[rllib]``; it imports nothing of kiloRL). Same shape as the other sides: ``--workers`` env
runners x ``--envs`` envs, 32-step fragments, 512-frame learner batches, the learner in the driver
process (``num_learners=0``), CPU; RLlib's other APPO settings are its defaults (V-trace on, its
circular buffer trains each batch ``circular_buffer_iterations_per_batch`` = 2 times).

Prints one JSON line per ``algo.train()`` and a last line ``{"result": ...}``: sustained frames/s
(env steps sampled between the first and the last iteration over the wall time between them, so
start-up and the iterations before the first sampled frame are left out, as on the other sides). Lag:
RLlib keeps no per-batch policy lag; it reports weight sequence numbers, the learner's and the env
runners' (the version each last received), printed per iteration, but in 2.60 they do not count the
same thing (a 5,000-frame trial here had the runners' at 15.4 against the learner's 11), so no lag
is derived from them and the result's lag fields are None.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def find(result: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(result, dict) or key not in result:
            return None
        result = result[key]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--frames", type=int, default=100_000)
    args = p.parse_args()

    import ray
    from ray.rllib.algorithms.appo import APPOConfig

    ray.init(num_cpus=args.workers + 1, include_dashboard=False, log_to_driver=False)
    config = (APPOConfig().environment(args.env)
              .env_runners(num_env_runners=args.workers, num_envs_per_env_runner=args.envs,
                           rollout_fragment_length=32)
              .learners(num_learners=0)
              .training(train_batch_size_per_learner=512)
              .debugging(seed=1))
    algo = config.build_algo()
    points: list[tuple[float, int]] = []
    while not points or points[-1][1] < args.frames:
        result = algo.train()
        steps = int(find(result, ("env_runners", "num_env_steps_sampled_lifetime")) or 0)
        if steps:
            points.append((time.time(), steps))
        learner_seq = find(result, ("learners", "default_policy", "weights_seq_no"))
        runner_seq = find(result, ("env_runners", "weights_seq_no"))
        print(json.dumps({"frames": steps, "learner_seq": learner_seq, "runner_seq": runner_seq,
                          "return": find(result, ("env_runners", "episode_return_mean"))}), flush=True)
    algo.stop()
    (t0, f0), (t1, f1) = points[0], points[-1]
    out = {"frames_per_s": (f1 - f0) / (t1 - t0) if t1 > t0 else None, "frames": f1, "iterations": len(points),
           "lag_min": None, "lag_mean": None, "lag_max": None}
    print(json.dumps({"result": out}), flush=True)


if __name__ == "__main__":
    main()
