"""``make demo``: train PPO on CartPole-v1 locally, evaluate it, plot the curve."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

from kilorl.config import load_config
from kilorl.trainer import Trainer
from kilorl.trainer.evaluate import evaluate
from kilorl.trainer.plotting import plot_runs

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cartpole_ppo.yaml"


def main() -> int:
    config = Path(sys.argv[1]) if len(sys.argv) > 1 else EXAMPLE
    run_dir = Path("runs") / f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    print(f"kiloRL demo: training PPO from {config} (embedded Ray, 1 actor + 1 learner + 1 parameter server)")
    result = Trainer(load_config(config), run_dir).fit()
    print(f"trained {result.env_steps:,} env steps in {result.wall_time:.1f}s "
          f"(start-up {result.startup_s:.1f}s); rolling return {result.episode_return_mean:.1f}")
    ev = evaluate(result.checkpoint, episodes=20)
    plot = plot_runs([run_dir], run_dir / "curves.png")
    print("\n=== result ===")
    print(f"evaluation: {ev.episode_return_mean:.1f} ± {ev.episode_return_std:.1f} over {ev.episodes} episodes (deterministic)")
    print(f"plot:       {plot}")
    print(f"checkpoint: {result.checkpoint}")
    print(f"metrics:    {run_dir / 'metrics.jsonl'}   (tensorboard --logdir {run_dir / 'tb'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
