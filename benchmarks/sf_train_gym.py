"""Sample Factory's ``sf_examples.train_gym_env`` for any Gymnasium id, run with Sample Factory's
own Python (``throughput_bench.py --sf-python``): its example registers CartPole-v1 alone, so
``--env=LunarLander-v2`` would fail with "unknown env". Registers the ``--env`` given and hands
the command line to Sample Factory unchanged. Imports nothing of kiloRL (another venv)."""

from __future__ import annotations

import sys

from sample_factory.envs.env_utils import register_env
from sample_factory.train import run_rl
from sf_examples.train_gym_env import make_gym_env_func, parse_custom_args


def main() -> int:
    env = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--env=")), None)
    if env is None:
        raise SystemExit("sf_train_gym.py: --env=ID is required")
    register_env(env, make_gym_env_func)
    return run_rl(parse_custom_args())


if __name__ == "__main__":
    sys.exit(main())
