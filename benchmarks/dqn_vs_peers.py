"""kiloRL DQN vs Stable-Baselines3 DQN on CartPole-v1: time and env steps to a rolling 475.

kiloRL trains ``examples/cartpole_dqn.yaml`` (``kilorl train``, rl-zoo's CartPole-v1 DQN
values); SB3 trains DQN with the same rl-zoo entry (``zoo_hyperparams.ZOO_DQN``, run by
``sb3_worker.py --algo dqn``). Everything else is ``ppo_vs_peers.py``'s machinery: one
subprocess per run with a wall-clock budget, kiloRL and SB3 alternated seed by seed (K S,
S K, ...) so load from other jobs hits both, the same threshold rule on both sides (the
mean of the last 20 finished *training* episodes first at 475; SB3 checks it every env
step, kiloRL every iteration of 256 env steps, so kiloRL can only be reported late), both
sides stopped there, runs that never get there counted as infinitely slow in the medians.
"Excl. start-up" is kiloRL's ``train_time`` and SB3's time from ``learn``'s training
start. Both sides use one torch thread and OMP/MKL_NUM_THREADS=1.

Two threshold rules (``--rule``):

- ``eval`` (default): the first *greedy evaluation* (10 episodes on an env of their own,
  episode k seeded 2,000,000 + k, every ``--eval-every`` env steps, right after the update
  that consumed them) with a mean of at least 475, on both sides; each side's evaluation
  time is left out of its time. This is what rl-zoo's published DQN scores measure, and the
  rule both sides can reach: at rl-zoo's final epsilon (0.04) neither side's *training*
  episodes held a rolling 475 within the 5e4 steps in any of 8 runs here (docs/benchmarks.md).
- ``rolling``: the mean of the last 20 finished training episodes first at 475 (SB3 checks
  it every env step, kiloRL every 256-step iteration, so kiloRL can only be reported late);
  kiloRL's periodic evaluation is switched off unless ``--keep-evaluation``.

    python benchmarks/dqn_vs_peers.py --seeds 5 --json-out dqn.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ppo_vs_peers as pvp  # noqa: E402  (a sibling script, not a package)

REPO = HERE.parent
ENV = pvp.BenchEnv("cartpole", "CartPole-v1", 475.0, 600.0, "examples/cartpole_dqn.yaml")
GOAL_RATIO = 0.6
"""The issue's goal: kiloRL's median time to the threshold (excl. start-up) <= 0.6x SB3's."""
NO_EVALUATION = ("evaluation.every_env_steps=null", "evaluation.keep_best=false")
"""Overrides that switch the example's periodic evaluation off (SB3's side has none)."""
PEER = "rl-zoo DQN entry (`hyperparams/dqn.yml` CartPole-v1, `zoo_hyperparams.ZOO_DQN`)"
EVAL_EVERY = 2560
"""Env steps between evaluations under ``--rule eval``: ten 256-step training phases."""
EVAL_EPISODES = 10


def eval_overrides(every: int) -> list[str]:
    """kiloRL under the ``eval`` rule: evaluate every ``every`` env steps and stop at the first
    evaluation at the threshold, not on the rolling training return."""
    return [f"evaluation.every_env_steps={every}", f"evaluation.episodes={EVAL_EPISODES}",
            f"evaluation.stop_return={ENV.threshold}", "evaluation.stop_consecutive=1",
            "evaluation.keep_best=false", "train.stop_return=null"]


def kilorl_eval_result(seed: int, run_dir: Path, rc: int, timed_out: bool) -> pvp.RunResult:
    """The first metrics row whose evaluation reached the threshold; its time less every
    evaluation's own time (``eval_s``) up to and including it."""
    result = pvp.kilorl_result(ENV, seed, run_dir, rc, timed_out)
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    result.reached, result.time_s, result.time_incl_startup_s, result.env_steps = False, None, None, None
    eval_s = 0.0
    for row in rows:
        eval_s += row.get("eval_s", 0.0)
        if row.get("eval_return_mean", float("-inf")) >= ENV.threshold:
            result.reached, result.stop_reason = True, "threshold"
            result.time_s, result.time_incl_startup_s = row["train_time"] - eval_s, row["wall_time"] - eval_s
            result.env_steps = row["env_steps"]
            break
    else:
        if result.stop_reason == "threshold":  # the rolling rule's hit does not count here
            result.stop_reason = "step_limit"
    return result


def run_kilorl_eval(config: Path, seed: int, budget_s: float, work: Path, overrides: list[str]) -> pvp.RunResult:
    return pvp.run_kilorl_evaluated(ENV, config, seed, budget_s, work, overrides, kilorl_eval_result)


def run_sb3_eval(seed: int, budget_s: float, work: Path, every: int) -> pvp.RunResult:
    run_dir = pvp._fresh(work / f"{ENV.key}-sb3-seed{seed}")
    out = run_dir / "result.json"
    t0 = time.time()
    cmd = [sys.executable, str(HERE / "sb3_worker.py"), "--env", ENV.gym_id, "--seed", str(seed),
           "--threshold", str(ENV.threshold), "--deadline", str(t0 + budget_s), "--out", str(out), "--algo", "dqn",
           "--eval-every", str(every), "--eval-episodes", str(EVAL_EPISODES)]
    rc, timed_out, leaked = pvp.run_with_deadline(cmd, run_dir / "logs", t0 + budget_s + 60.0)
    result = pvp.RunResult("SB3", ENV.key, seed, reached=False, stop_reason="budget" if timed_out else "crashed",
                           run_dir=str(run_dir))
    if rc == 0 and out.is_file():
        data = json.loads(out.read_text())
        result = pvp.RunResult("SB3", ENV.key, seed, reached=data["reached"], stop_reason=data["stop_reason"],
                               time_s=data.get("time_s"), time_incl_startup_s=data.get("time_incl_startup_s"),
                               env_steps=data.get("env_steps"), startup_s=data["startup_s"],
                               env_steps_total=data["env_steps_total"], final_return_mean=data["final_return_mean"],
                               run_dir=str(run_dir))
    elif rc != 0:
        result.error = f"exit code {rc}: " + pvp._tail(run_dir / "logs" / "stderr.log")
    result.process_wall_s, result.leaked_processes = time.time() - t0, leaked
    return result


def pair_order(index: int) -> tuple[str, str]:
    """Who goes first in the ``index``-th seed's pair: kiloRL on even pairs, SB3 on odd ones."""
    return ("kiloRL", "SB3") if index % 2 == 0 else ("SB3", "kiloRL")


def kilorl_overrides(extra: list[str], keep_evaluation: bool) -> list[str]:
    """The overrides every kiloRL run gets: evaluation off unless kept, then the user's own."""
    return [*(() if keep_evaluation else NO_EVALUATION), *extra]


def check_dqn_config(path: Path, overrides: list[str]) -> str | None:
    """None when ``path`` is a kiloRL DQN config for CartPole-v1; otherwise why not."""
    problem = pvp.check_config(ENV, path, overrides)
    if problem:
        return problem
    from kilorl.config import load_config

    name = load_config(str(path), list(overrides)).algo.name
    return None if name == "dqn" else f"kiloRL config {path} trains algo.name={name!r}, not 'dqn'"


def goal_line(summary: dict[str, Any]) -> str:
    """The goal's verdict from the summary's ratio (or its bound when one median is unreached)."""
    r = summary.get("ratio", {}).get("time")
    if r is not None:
        return (f"Goal: kiloRL/SB3 median time to 475 <= {GOAL_RATIO} (excl. start-up): "
                f"{'met' if r <= GOAL_RATIO else 'NOT met'} ({r:.2f}).")
    bound = summary.get("ratio_bound", {}).get("time")
    if bound:
        value = float(bound.split()[1])
        met = bound.startswith("<=") and value <= GOAL_RATIO
        return f"Goal: kiloRL/SB3 median time to 475 <= {GOAL_RATIO} (excl. start-up): {'met' if met else 'NOT met'} ({bound})."
    return f"Goal: kiloRL/SB3 median time to 475 <= {GOAL_RATIO} (excl. start-up): no ratio (a median is unreached)."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=pvp.parse_seeds, default=pvp.parse_seeds("5"), help="count (5 = seeds 1..5) or list 1,5,9")
    p.add_argument("--frameworks", type=pvp.parse_frameworks, default=list(pvp.FRAMEWORKS),
                   help="comma list of kiloRL, SB3 (one alone: no ratio)")
    p.add_argument("--budget-s", type=float, default=ENV.budget_s, help="wall-clock budget per run, seconds")
    p.add_argument("--config", type=Path, default=REPO / ENV.default_config, help=f"kiloRL config (default {ENV.default_config})")
    p.add_argument("--kilorl-override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="extra -o override for every kiloRL run (repeatable; recorded in the JSON)")
    p.add_argument("--rule", choices=("eval", "rolling"), default="eval",
                   help="threshold on greedy evaluations (default) or on the rolling training return")
    p.add_argument("--eval-every", type=int, default=EVAL_EVERY, help="env steps between evaluations (--rule eval)")
    p.add_argument("--keep-evaluation", action="store_true",
                   help="--rule rolling: keep the config's periodic evaluation (default: off)")
    p.add_argument("--json-out", type=Path, help="write all runs and the summary here as JSON")
    p.add_argument("--work-dir", type=Path, help="where run directories go (default runs/dqn_vs_peers/<time>)")
    return p


def run_pairs(seeds: list[int], frameworks: list[str], config: Path, budget_s: float, work: Path,
              overrides: list[str], eval_every: int | None = None) -> list[pvp.RunResult]:
    """Every seed's kiloRL and SB3 run, alternating who goes first; ``eval_every``: the eval rule."""
    results: list[pvp.RunResult] = []
    for i, seed in enumerate(seeds):
        for fw in (f for f in pair_order(i) if f in frameworks):
            print(f"[{datetime.now(UTC):%H:%M:%S}] {ENV.gym_id} DQN {fw} seed {seed} ...", file=sys.stderr, flush=True)
            if fw == "kiloRL":
                r = (run_kilorl_eval(config, seed, budget_s, work, overrides) if eval_every
                     else pvp.run_kilorl(ENV, config, seed, budget_s, work, overrides))
            else:
                r = (run_sb3_eval(seed, budget_s, work, eval_every) if eval_every
                     else pvp.run_sb3(ENV, seed, budget_s, work, algo="dqn"))
            results.append(r)
            print(f"    reached={r.reached} time_s={pvp._fmt(r.time_s)} steps={pvp._fmt(r.env_steps, thousands=True)} "
                  f"stop={r.stop_reason}" + (f" error={r.error}" if r.error else ""), file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.budget_s <= 0:
        print("error: --budget-s must be positive", file=sys.stderr)
        return 2
    eval_every = args.eval_every if args.rule == "eval" else None
    if eval_every is not None and eval_every <= 0:
        print("error: --eval-every must be positive", file=sys.stderr)
        return 2
    overrides = ([*eval_overrides(eval_every), *args.kilorl_override] if eval_every
                 else kilorl_overrides(args.kilorl_override, args.keep_evaluation))
    problem = check_dqn_config(args.config, overrides)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    work = args.work_dir or REPO / "runs" / "dqn_vs_peers" / started.strftime("%Y%m%d-%H%M%S")
    results = run_pairs(args.seeds, args.frameworks, args.config, args.budget_s, work, overrides, eval_every)
    summary = pvp.summarize(results)
    shown = pvp._shown(args.config)
    rule = (f"the first greedy evaluation ({EVAL_EPISODES} episodes every {eval_every:,} env steps) at a mean of "
            f"{ENV.threshold:g}") if eval_every else None
    print(pvp.markdown(ENV, results, summary, args.budget_s, shown, overrides, peer=PEER, rule=rule) + "\n", flush=True)
    goal = goal_line(summary) if "ratio" in summary else None
    if goal:
        print(goal + "\n", flush=True)
    report = {
        "started_utc": started.isoformat(timespec="seconds"), "command": sys.argv, "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(), "window": pvp.WINDOW, "gym_id": ENV.gym_id, "threshold": ENV.threshold,
        "budget_s": args.budget_s, "rule": args.rule, "eval_every": eval_every, "kilorl_config": shown,
        "kilorl_overrides": overrides,
        "runs": [asdict(r) for r in results], "goal": goal,
        "summary": {k: asdict(v) if isinstance(v, pvp.FrameworkSummary) else v for k, v in summary.items()},
    }
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(pvp._json_safe(report), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
