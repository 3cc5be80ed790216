"""Train PPO through the Python API, then evaluate the final checkpoint.

    python examples/train_api.py            # CartPole-v1, ~30 s on a laptop
"""

from pathlib import Path

from kilorl import Trainer, load_config
from kilorl.trainer.evaluate import evaluate

config = load_config(
    Path(__file__).parent / "cartpole_ppo.yaml",
    overrides=["train.seed=7", "train.stop_return=475", "train.pipeline_depth=1"],
)
result = Trainer(config, run_dir="runs/api-cartpole").fit()
print(f"{result.env_steps} env steps, rolling return {result.episode_return_mean:.1f}")

score = evaluate(result.checkpoint, episodes=20)
print(f"eval: {score.episode_return_mean:.1f} ± {score.episode_return_std:.1f}")
