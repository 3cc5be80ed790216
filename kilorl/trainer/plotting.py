"""Learning curves: return vs env steps and vs wall time, one line per run; a run's
evaluations during training (``evaluation`` section) as dashed markers in its colour."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from kilorl.trainer.metrics import read_metrics  # noqa: E402


def evaluations(run: Path) -> list[dict]:
    """The metric rows of a run's evaluations during training (what the dashed line shows)."""
    return [r for r in read_metrics(run) if r.get("eval_return_mean") is not None]


def plot_runs(run_dirs: list[Path], out: Path) -> Path:
    fig, (ax_steps, ax_time) = plt.subplots(1, 2, figsize=(11, 4))
    plotted = 0
    for run in run_dirs:
        rows = [r for r in read_metrics(run) if r.get("episode_return_mean") is not None]
        if not rows:
            continue
        label = Path(run).name
        ret = [r["episode_return_mean"] for r in rows]
        (line,) = ax_steps.plot([r["env_steps"] for r in rows], ret, label=label)
        ax_time.plot([r["wall_time"] for r in rows], ret, label=label, color=line.get_color())
        evals = evaluations(run)
        if evals:
            ev = [r["eval_return_mean"] for r in evals]
            style = {"color": line.get_color(), "linestyle": "--", "marker": "o", "markersize": 3}
            ax_steps.plot([r["env_steps"] for r in evals], ev, label=f"{label} (evaluation)", **style)
            ax_time.plot([r["wall_time"] for r in evals], ev, **style)
        plotted += 1
    if not plotted:
        plt.close(fig)
        raise ValueError("no finished episodes in any of the runs: nothing to plot")
    ax_steps.set_xlabel("env steps")
    ax_time.set_xlabel("wall time (s)")
    for ax in (ax_steps, ax_time):
        ax.set_ylabel("episode return (rolling mean; dashed: evaluation)")
        ax.grid(alpha=0.3)
    ax_steps.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
