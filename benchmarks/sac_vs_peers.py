"""kiloRL SAC vs Stable-Baselines3 SAC: Pendulum-v1 time to -200, HalfCheetah-v5 return at 100k env steps.

kiloRL trains ``examples/pendulum_sac.yaml`` (``kilorl train``, rl-zoo's Pendulum-v1 SAC values);
SB3 trains SAC with the same rl-zoo entry (``zoo_hyperparams.ZOO_SAC``, run by
``sb3_worker.py --algo sac``). The machinery is ``ppo_vs_peers.py``'s: one subprocess per
run with a wall-clock budget, kiloRL and SB3 alternated seed by seed (K S, S K, ...) so load
from other jobs hits both, runs that never get there counted as infinitely slow in the medians.

The threshold rule is the issue's: the first greedy evaluation (10 episodes on an env of their
own, episode k seeded 2,000,000 + k, every ``--eval-every`` env steps, right after the update
that consumed them) with a mean of at least -200, within rl-zoo's 20k env steps. Each side's
evaluation time is left out of its time; "excl. start-up" is kiloRL's ``train_time`` and SB3's
time from ``learn``'s training start. Both sides use one torch thread.

    python benchmarks/sac_vs_peers.py --seeds 3 --json-out sac.json

``--env halfcheetah`` (``examples/halfcheetah_sac.yaml``, rl-zoo's HalfCheetah entry) has no
threshold: both sides train ``--env-steps`` (100k) and the measure is each run's last greedy
evaluation there; the goal is kiloRL's median within 10 % of SB3's.

    python benchmarks/sac_vs_peers.py --env halfcheetah --seeds 3 --json-out cheetah.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
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
ENVS = {
    "pendulum": pvp.BenchEnv("pendulum", "Pendulum-v1", -200.0, 900.0, "examples/pendulum_sac.yaml"),
    "halfcheetah": pvp.BenchEnv("halfcheetah", "HalfCheetah-v5", math.inf, 7200.0, "examples/halfcheetah_sac.yaml"),
}
"""An infinite threshold: no stop on a return, the run trains its env steps (``--env-steps``)."""
ENV = ENVS["pendulum"]
"""The environment of this invocation (``--env``)."""
EVAL_EVERY = {"pendulum": 1024, "halfcheetah": 25_000}
"""Default env steps between evaluations: Pendulum 32 of the example's 32-step rollouts."""
EVAL_EPISODES = 10


def peer() -> str:
    return f"rl-zoo SAC entry (`hyperparams/sac.yml` {ENV.gym_id}, `zoo_hyperparams.ZOO_SAC`)"


def eval_overrides(every: int, env_steps: int | None = None) -> list[str]:
    """kiloRL stops at the first evaluation at the threshold, as the SB3 side does; with no
    threshold it trains ``env_steps``."""
    stop = "null" if math.isinf(ENV.threshold) else ENV.threshold
    budget = [] if env_steps is None else [f"train.total_env_steps={env_steps}"]
    return [f"evaluation.every_env_steps={every}", f"evaluation.episodes={EVAL_EPISODES}",
            f"evaluation.stop_return={stop}", "evaluation.stop_consecutive=1",
            "evaluation.keep_best=false", "train.stop_return=null", *budget]


def kilorl_eval_result(seed: int, run_dir: Path, rc: int, timed_out: bool) -> pvp.RunResult:
    """The first metrics row whose evaluation reached the threshold; its time less every
    evaluation's own time (``eval_s``) up to and including it."""
    result = pvp.kilorl_result(ENV, seed, run_dir, rc, timed_out)
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    result.reached, result.time_s, result.time_incl_startup_s, result.env_steps = False, None, None, None
    result.stop_reason = "budget" if timed_out else ("step_limit" if rc == 0 else "crashed")
    eval_s = 0.0
    for row in rows:
        eval_s += row.get("eval_s", 0.0)
        if row.get("eval_return_mean", float("-inf")) >= ENV.threshold:
            result.reached, result.stop_reason = True, "threshold"
            result.time_s, result.time_incl_startup_s = row["train_time"] - eval_s, row["wall_time"] - eval_s
            result.env_steps = row["env_steps"]
            break
    evals = [row["eval_return_mean"] for row in rows if "eval_return_mean" in row]
    result.final_return_mean = evals[-1] if evals else None
    result.env_steps_total = rows[-1]["env_steps"] if rows else None
    return result


def run_kilorl(config: Path, seed: int, budget_s: float, work: Path, overrides: list[str]) -> pvp.RunResult:
    return pvp.run_kilorl_evaluated(ENV, config, seed, budget_s, work, overrides, kilorl_eval_result)


def run_sb3(seed: int, budget_s: float, work: Path, every: int, env_steps: int | None = None) -> pvp.RunResult:
    run_dir = pvp._fresh(work / f"{ENV.key}-sb3-seed{seed}")
    out = run_dir / "result.json"
    t0 = time.time()
    cmd = [sys.executable, str(HERE / "sb3_worker.py"), "--env", ENV.gym_id, "--seed", str(seed),
           "--threshold", str(ENV.threshold), "--deadline", str(t0 + budget_s), "--out", str(out), "--algo", "sac",
           "--eval-every", str(every), "--eval-episodes", str(EVAL_EPISODES),
           *(["--total-steps", str(env_steps)] if env_steps else [])]
    rc, timed_out, leaked = pvp.run_with_deadline(cmd, run_dir / "logs", t0 + budget_s + 60.0)
    result = pvp.RunResult("SB3", ENV.key, seed, reached=False, stop_reason="budget" if timed_out else "crashed",
                           run_dir=str(run_dir))
    if rc == 0 and out.is_file():
        data = json.loads(out.read_text())
        evals = data.get("evaluations") or []
        result = pvp.RunResult("SB3", ENV.key, seed, reached=data["reached"], stop_reason=data["stop_reason"],
                               time_s=data.get("time_s"), time_incl_startup_s=data.get("time_incl_startup_s"),
                               env_steps=data.get("env_steps"), startup_s=data["startup_s"],
                               env_steps_total=data["env_steps_total"],
                               final_return_mean=evals[-1][1] if evals else None, run_dir=str(run_dir))
    elif rc != 0:
        result.error = f"exit code {rc}: " + pvp._tail(run_dir / "logs" / "stderr.log")
    result.process_wall_s, result.leaked_processes = time.time() - t0, leaked
    return result


def run_pairs(seeds: list[int], frameworks: list[str], config: Path, budget_s: float, work: Path,
              overrides: list[str], every: int, env_steps: int | None = None) -> list[pvp.RunResult]:
    """Every seed's kiloRL and SB3 run, kiloRL first on even pairs, SB3 first on odd ones."""
    results: list[pvp.RunResult] = []
    for i, seed in enumerate(seeds):
        order = ("kiloRL", "SB3") if i % 2 == 0 else ("SB3", "kiloRL")
        for fw in (f for f in order if f in frameworks):
            print(f"[{datetime.now(UTC):%H:%M:%S}] {ENV.gym_id} SAC {fw} seed {seed} ...", file=sys.stderr, flush=True)
            r = (run_kilorl(config, seed, budget_s, work, overrides) if fw == "kiloRL"
                 else run_sb3(seed, budget_s, work, every, env_steps))
            results.append(r)
            print(f"    reached={r.reached} time_s={pvp._fmt(r.time_s)} steps={pvp._fmt(r.env_steps, thousands=True)} "
                  f"stop={r.stop_reason} last_eval={pvp._fmt(r.final_return_mean)}"
                  + (f" error={r.error}" if r.error else ""), file=sys.stderr, flush=True)
    return results


def at_steps_summary(results: list[pvp.RunResult]) -> dict[str, Any]:
    """Per framework the median of the runs' last evaluations; kiloRL's over SB3's and the goal
    (kiloRL's median at least SB3's less 10 % of its magnitude)."""
    finals = {fw: [r.final_return_mean for r in results if r.framework == fw and r.final_return_mean is not None]
              for fw in pvp.FRAMEWORKS}
    medians = {fw: statistics.median(v) for fw, v in finals.items() if v}
    out: dict[str, Any] = {"finals": finals, "median_final": medians}
    if len(medians) == 2:
        k, s = medians["kiloRL"], medians["SB3"]
        out["ratio"] = k / s if s else None
        out["within_10_percent"] = k >= s - 0.1 * abs(s)
    return out


def at_steps_markdown(results: list[pvp.RunResult], summary: dict[str, Any], env_steps: int, every: int,
                      kilorl_config: str) -> str:
    lines = [f"### {ENV.gym_id}: greedy evaluation ({EVAL_EPISODES} episodes) at {env_steps:,} env steps",
             f"kiloRL: `{kilorl_config}`; SB3: {peer()}; evaluations every {every:,} env steps.", "",
             "| framework | seed | last evaluation | env steps | process wall s | error |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.framework} | {r.seed} | {pvp._fmt(r.final_return_mean)} | "
                     f"{pvp._fmt(r.env_steps_total, thousands=True)} | {pvp._fmt(r.process_wall_s)} | {r.error or ''} |")
    med = summary["median_final"]
    lines.append("")
    lines.append("Median last evaluation: " + ", ".join(f"{fw} {v:.1f}" for fw, v in med.items()))
    if "ratio" in summary:
        lines.append(f"kiloRL/SB3: {pvp._fmt(summary['ratio'])}; goal (within 10 % of SB3): "
                     + ("met" if summary["within_10_percent"] else "NOT met"))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", choices=sorted(ENVS), default="pendulum",
                   help="pendulum: time to -200; halfcheetah: return at --env-steps")
    p.add_argument("--env-steps", type=int, default=100_000, help="halfcheetah: env steps of every run")
    p.add_argument("--seeds", type=pvp.parse_seeds, default=pvp.parse_seeds("3"), help="count (3 = seeds 1..3) or list 1,5,9")
    p.add_argument("--frameworks", type=pvp.parse_frameworks, default=list(pvp.FRAMEWORKS),
                   help="comma list of kiloRL, SB3 (one alone: no ratio)")
    p.add_argument("--budget-s", type=float, help="wall-clock budget per run, seconds (default: the env's)")
    p.add_argument("--config", type=Path, help="kiloRL config (default: the env's example)")
    p.add_argument("--kilorl-override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="extra -o override for every kiloRL run (repeatable; recorded in the JSON)")
    p.add_argument("--eval-every", type=int, help="env steps between evaluations (default: the env's)")
    p.add_argument("--json-out", type=Path, help="write all runs and the summary here as JSON")
    p.add_argument("--work-dir", type=Path, help="where run directories go (default runs/sac_vs_peers/<time>)")
    return p


def main(argv: list[str] | None = None) -> int:
    global ENV
    args = build_parser().parse_args(argv)
    ENV = ENVS[args.env]
    args.budget_s = args.budget_s or ENV.budget_s
    args.config = args.config or REPO / ENV.default_config
    args.eval_every = args.eval_every or EVAL_EVERY[args.env]
    env_steps = args.env_steps if math.isinf(ENV.threshold) else None
    if args.budget_s <= 0 or args.eval_every <= 0 or args.env_steps <= 0:
        print("error: --budget-s, --eval-every and --env-steps must be positive", file=sys.stderr)
        return 2
    overrides = [*eval_overrides(args.eval_every, env_steps), *args.kilorl_override]
    from kilorl.config import load_config

    name = load_config(str(args.config), list(overrides)).algo.name
    if name != "sac":
        print(f"error: kiloRL config {args.config} trains algo.name={name!r}, not 'sac'", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    work = args.work_dir or REPO / "runs" / "sac_vs_peers" / started.strftime("%Y%m%d-%H%M%S")
    results = run_pairs(args.seeds, args.frameworks, args.config, args.budget_s, work, overrides, args.eval_every, env_steps)
    summary = pvp.summarize(results)
    shown = pvp._shown(args.config)
    if env_steps is None:
        rule = (f"the first greedy evaluation ({EVAL_EPISODES} episodes every {args.eval_every:,} env steps) at a mean of "
                f"{ENV.threshold:g}")
        print(pvp.markdown(ENV, results, summary, args.budget_s, shown, overrides, peer=peer(), rule=rule) + "\n", flush=True)
    else:
        summary["at_env_steps"] = at_steps_summary(results)
        print(at_steps_markdown(results, summary["at_env_steps"], env_steps, args.eval_every, shown) + "\n", flush=True)
    report = {
        "started_utc": started.isoformat(timespec="seconds"), "command": sys.argv, "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(), "gym_id": ENV.gym_id, "threshold": None if math.isinf(ENV.threshold) else ENV.threshold,
        "env_steps": env_steps, "budget_s": args.budget_s,
        "eval_every": args.eval_every, "kilorl_config": shown, "kilorl_overrides": overrides,
        "runs": [asdict(r) for r in results],
        "summary": {k: asdict(v) if isinstance(v, pvp.FrameworkSummary) else v for k, v in summary.items()},
    }
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(pvp._json_safe(report), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
