"""SAC from scratch, from a recorded dataset alone, and mixed with it (RLPD's recipe), side by side.

Three arms of one kiloRL config, at equal env steps (the offline arm's step clock: no env is
stepped, ``parallelism.actor: 0``), rotated seed by seed (seed 1: scratch offline mixed, seed 2:
offline mixed scratch, ...) so that load from other jobs hits every arm:

- ``scratch``: the config as it is;
- ``offline``: ``parallelism.actor: 0`` and ``replay_buffer.offline`` at ratio 1.0;
- ``mixed``: ``replay_buffer.offline`` at ``--ratio`` (0.5) with ``algo.utd_ratio`` ``--utd`` and
  ``algo.critic_layer_norm: true``.

Each run evaluates every ``--eval-every`` env steps (greedy, 10 episodes, on the learner's own
env). The issue's measure: the env steps at which the mixed run's evaluation first reaches the
from-scratch run's final evaluation, as a share of the from-scratch run's env steps (goal <= 0.5).
With ``--eval-env-kwarg`` (repeatable) every run's last checkpoint is also played on the env with
those constructor arguments: the "real" system of a sim + real run (docs/recorded_data.md).

    python benchmarks/sac_mixing.py --config examples/lunarlander_continuous_sac.yaml \\
        --dataset runs/ll_half --env-steps 15000 --seeds 1 --json-out mixing.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ppo_vs_peers as pvp  # noqa: E402  (a sibling script, not a package)

REPO = HERE.parent
ARMS = ("scratch", "offline", "mixed")
EVAL_EPISODES = 10


def arm_overrides(arm: str, dataset: Path, ratio: float, utd: float, backend: str = "learner",
                  mixed: tuple[str, ...] = ()) -> list[str]:
    """What each arm changes in the config; ``backend``: where the recorded rows live
    (``store``: an immutable table on the store workers); ``mixed``: further overrides of the
    mixed arm alone (RLPD's ``algo.num_qs=10``, ``algo.num_min_qs=2``)."""
    offline = f"replay_buffer={{backend: {backend}, offline: {{path: {dataset}, ratio: {{r}}}}}}"
    if arm == "scratch":
        return []
    if arm == "offline":
        return ["parallelism.actor=0", offline.replace("{r}", "1.0")]
    return [offline.replace("{r}", str(ratio)), f"algo.utd_ratio={utd}", "algo.critic_layer_norm=true", *mixed]


def run_arm(arm: str, seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One ``kilorl train`` run; its evaluations (env steps, return, training time less evaluations)."""
    run_dir = pvp._fresh(work / f"{arm}-seed{seed}")
    overrides = [f"train.total_env_steps={args.env_steps}", f"evaluation.every_env_steps={args.eval_every}",
                 f"evaluation.episodes={EVAL_EPISODES}", "evaluation.keep_best=false", "evaluation.stop_return=null",
                 "train.stop_return=null", "train.torch_threads=1", "logging.progress=false",
                 "logging.tensorboard=false", *args.kilorl_override,
                 *arm_overrides(arm, args.dataset.resolve(), args.ratio, args.utd, args.backend,
                                tuple(args.mixed_override))]
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", str(args.config), "--run-dir", str(run_dir),
           "--seed", str(seed), *(a for o in overrides for a in ("-o", o))]
    t0 = time.time()
    rc, timed_out, leaked = pvp.run_with_deadline(cmd, run_dir / "logs", t0 + args.budget_s,
                                                  extra_env={"RAY_ADDRESS": "local"})
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    evals, eval_s = [], 0.0
    for row in rows:
        eval_s += row.get("eval_s", 0.0)
        if "eval_return_mean" in row:
            evals.append((row["env_steps"], row["eval_return_mean"], row["train_time"] - eval_s))
    out: dict[str, Any] = {"arm": arm, "seed": seed, "rc": rc, "timed_out": timed_out, "leaked": leaked,
                           "evals": evals, "env_steps": rows[-1]["env_steps"] if rows else 0,
                           "startup_s": rows[-1].get("startup_s") if rows else None,
                           "gradient_steps": gradient_steps(run_dir),
                           "process_wall_s": time.time() - t0, "run_dir": str(run_dir)}
    if rc != 0:
        out["error"] = pvp._tail(run_dir / "logs" / "stderr.log")
    elif args.eval_env_kwarg:
        from kilorl.cli.record import env_kwargs
        from kilorl.trainer.evaluate import evaluate

        played = evaluate(run_dir, episodes=args.real_episodes, checkpoint="latest", env_kwargs=env_kwargs(args.eval_env_kwarg))
        out["real_return_mean"], out["real_return_std"] = played.episode_return_mean, played.episode_return_std
    return out


def gradient_steps(run_dir: Path) -> int | None:
    """Critic steps the run took (its newest checkpoint's ``updates``; the metric rows are written
    every ``logging.report_every_s``, not at every update, so their sum would miss some)."""
    from kilorl.trainer.checkpoint import latest_checkpoint, load_checkpoint

    last = latest_checkpoint(run_dir)
    return None if last is None else int(load_checkpoint(last)[1]["updates"])


def steps_to(evals: list[tuple[int, float, float]], target: float) -> int | None:
    """Env steps of the first evaluation at or above ``target``."""
    return next((steps for steps, ret, _ in evals if ret >= target), None)


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per seed: the mixed run's env steps to the scratch run's final return, as a share of the
    scratch run's steps; per arm: the median final evaluation."""
    by = {(r["arm"], r["seed"]): r for r in results}
    seeds = sorted({r["seed"] for r in results})
    per_seed = []
    for seed in seeds:
        scratch, mixed = by.get(("scratch", seed)), by.get(("mixed", seed))
        if not (scratch and mixed and scratch["evals"] and mixed["evals"]):
            continue
        target = scratch["evals"][-1][1]
        hit = steps_to(mixed["evals"], target)
        per_seed.append({"seed": seed, "scratch_final": target, "scratch_env_steps": scratch["env_steps"],
                         "mixed_steps_to_it": hit, "share": None if hit is None else hit / scratch["env_steps"]})
    finals = {arm: [r["evals"][-1][1] for r in results if r["arm"] == arm and r["evals"]] for arm in ARMS}
    real = {arm: [r["real_return_mean"] for r in results if r["arm"] == arm and "real_return_mean" in r] for arm in ARMS}
    return {"per_seed": per_seed,
            "median_final": {a: statistics.median(v) for a, v in finals.items() if v},
            "median_real": {a: statistics.median(v) for a, v in real.items() if v}}


def markdown(results: list[dict[str, Any]], summary: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [f"{args.env_steps:,} env steps per run, evaluation every {args.eval_every:,} ({EVAL_EPISODES} greedy episodes); "
             f"mixed: ratio {args.ratio}, utd_ratio {args.utd}, critic_layer_norm"
             + "".join(f", {o}" for o in args.mixed_override) + f"; recorded rows on the {args.backend}",
             "", "| arm | seed | evaluations (env steps: return) | final | train time excl. eval (s) | gradient steps |"
             + (" real env return |" if args.eval_env_kwarg else ""),
             "|---|---|---|---|---|---|" + ("---|" if args.eval_env_kwarg else "")]
    for r in results:
        evs = ", ".join(f"{s // 1000}k: {v:.0f}" for s, v, _ in r["evals"]) or r.get("error", "none")
        final = f"{r['evals'][-1][1]:.1f}" if r["evals"] else "n/a"
        t = f"{r['evals'][-1][2]:.0f}" if r["evals"] else "n/a"
        real = f" {r['real_return_mean']:.1f} ± {r['real_return_std']:.1f} |" if "real_return_mean" in r else \
            (" n/a |" if args.eval_env_kwarg else "")
        lines.append(f"| {r['arm']} | {r['seed']} | {evs} | {final} | {t} | {r['gradient_steps'] or 0:,} |{real}")
    lines.append("")
    for s in summary["per_seed"]:
        hit = "never" if s["mixed_steps_to_it"] is None else f"{s['mixed_steps_to_it']:,} env steps ({s['share']:.2f}x)"
        lines.append(f"- seed {s['seed']}: scratch's final {s['scratch_final']:.1f} at {s['scratch_env_steps']:,}; "
                     f"mixed reached it at {hit} (goal <= 0.5x)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, required=True, help="kiloRL SAC config (the scratch arm as it is)")
    p.add_argument("--dataset", type=Path, required=True, help="a dataset kilorl record wrote")
    p.add_argument("--seeds", type=pvp.parse_seeds, default=pvp.parse_seeds("3"), help="count (3 = seeds 1..3) or list")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    p.add_argument("--env-steps", type=int, required=True, help="env steps of every run (the offline arm's clock)")
    p.add_argument("--eval-every", type=int, default=2500, help="env steps between evaluations")
    p.add_argument("--ratio", type=float, default=0.5, help="the mixed arm's recorded share of every batch")
    p.add_argument("--utd", type=float, default=2.0, help="the mixed arm's algo.utd_ratio")
    p.add_argument("--budget-s", type=float, default=900.0, help="wall-clock budget per run, seconds")
    p.add_argument("--kilorl-override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="extra -o override for every run (repeatable)")
    p.add_argument("--mixed-override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="extra -o override for the mixed arm only (repeatable), e.g. algo.num_qs=10")
    p.add_argument("--backend", choices=("learner", "store"), default="learner",
                   help="where the recorded rows live (replay_buffer.backend of the offline and mixed arms)")
    p.add_argument("--eval-env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="also play every run's last policy on the env with these constructor arguments")
    p.add_argument("--real-episodes", type=int, default=20, help="episodes of that play")
    p.add_argument("--json-out", type=Path)
    p.add_argument("--work-dir", type=Path, help="where run directories go (default runs/sac_mixing/<time>)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ARMS for a in arms):
        print(f"error: --arms must name some of {', '.join(ARMS)}", file=sys.stderr)
        return 2
    if args.env_steps <= 0 or args.eval_every <= 0 or not 0 < args.ratio < 1:
        print("error: --env-steps and --eval-every must be positive, --ratio in (0, 1)", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    work = args.work_dir or REPO / "runs" / "sac_mixing" / started.strftime("%Y%m%d-%H%M%S")
    results = []
    for i, seed in enumerate(args.seeds):
        for arm in arms[i % len(arms):] + arms[:i % len(arms)]:
            print(f"[{datetime.now(UTC):%H:%M:%S}] {arm} seed {seed} ...", file=sys.stderr, flush=True)
            r = run_arm(arm, seed, args, work)
            results.append(r)
            print(f"    evals={[(s, round(v, 1)) for s, v, _ in r['evals']]} rc={r['rc']}"
                  + (f" real={r['real_return_mean']:.1f}" if "real_return_mean" in r else "")
                  + (f" error={r['error']}" if "error" in r else ""), file=sys.stderr, flush=True)
    summary = summarize(results)
    print(markdown(results, summary, args), flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "started_utc": started.isoformat(timespec="seconds"), "command": sys.argv, "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg(), "results": results, "summary": summary}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
