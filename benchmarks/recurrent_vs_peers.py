"""kiloRL LSTM-PPO vs SB3-contrib RecurrentPPO on CartPole with the velocities hidden.

Both sides train on ``kilorl.envs.memory:CartPoleNoVelocity`` (obs[1] and obs[3] zeroed, 500-step
episodes): kiloRL with ``examples/cartpole_masked_lstm.yaml``, SB3-contrib with rl-zoo's
``ppo_lstm`` CartPoleNoVel-v1 values (``zoo_hyperparams.ZOO_PPO_LSTM``). Seeds alternate the
order (kiloRL first on even-indexed pairs, SB3-contrib first on odd ones) so load from other
jobs hits both sides. The rule and the measurements are ``ppo_vs_peers.py``'s: a run reaches
when the mean of its last 20 training episodes first gets to 475; time excluding start-up
(kiloRL ``train_time``, SB3 from ``learn``'s start) and env steps to it; a run that does not
reach counts as infinitely slow. Also reported: kiloRL's env steps/s over each run.

    python benchmarks/recurrent_vs_peers.py --seeds 1-3 --json-out bench.json
    python benchmarks/recurrent_vs_peers.py --seeds 1 --kilorl-override model.recurrent=null   # feed-forward
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ppo_vs_peers import (  # noqa: E402 - the sibling benchmark's machinery
    REPO,
    BenchEnv,
    RunResult,
    _fmt,
    _json_safe,
    markdown,
    parse_seeds,
    run_kilorl,
    run_sb3,
    summarize,
)

ENV = BenchEnv("cartpole_novel", "kilorl.envs.memory:CartPoleNoVelocity", 475.0, 1200.0,
               "examples/cartpole_masked_lstm.yaml")


def kilorl_sps(result: RunResult) -> float | None:
    """Env steps per second of a kiloRL run over its training (``env_steps / train_time`` of its last row)."""
    if not result.run_dir:
        return None
    metrics = Path(result.run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    last = next((r for r in reversed(rows) if r.get("train_time")), None)
    return None if last is None else last["env_steps"] / last["train_time"]


def sb3_sps(result: RunResult) -> float | None:
    """Env steps per second of an SB3 run after its start-up (its process time less start-up; an
    upper bound on the time, so a lower bound on the rate)."""
    if not result.env_steps_total or result.startup_s is None or result.process_wall_s <= result.startup_s:
        return None
    return result.env_steps_total / (result.process_wall_s - result.startup_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=parse_seeds, default=[1, 2, 3], help="e.g. 1-3 or 1,4")
    p.add_argument("--frameworks", default="kiloRL,SB3", help="kiloRL, SB3 or both (comma-separated)")
    p.add_argument("--budget-s", type=float, default=ENV.budget_s, help="wall-clock budget of one run")
    p.add_argument("--config", type=Path, default=REPO / ENV.default_config)
    p.add_argument("--kilorl-override", action="append", default=[], help="SECTION.FIELD=VALUE for kiloRL")
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    frameworks = [f.strip() for f in args.frameworks.split(",")]
    started = datetime.now(UTC)
    work = args.work_dir or REPO / "runs" / "recurrent_vs_peers" / started.strftime("%Y%m%d-%H%M%S")
    results: list[RunResult] = []
    sps: dict[int, float | None] = {}
    for i, seed in enumerate(args.seeds):
        order = ("kiloRL", "SB3") if i % 2 == 0 else ("SB3", "kiloRL")
        for fw in (f for f in order if f in frameworks):
            print(f"[{datetime.now(UTC):%H:%M:%S}] {fw} seed {seed} ...", file=sys.stderr, flush=True)
            if fw == "kiloRL":
                r = run_kilorl(ENV, args.config, seed, args.budget_s, work, args.kilorl_override)
                sps[seed] = kilorl_sps(r)
            else:
                r = run_sb3(ENV, seed, args.budget_s, work, algo="ppo_lstm")
            results.append(r)
            print(f"    reached={r.reached} time_s={_fmt(r.time_s)} steps={_fmt(r.env_steps, thousands=True)} "
                  f"stop={r.stop_reason}" + (f" error={r.error}" if r.error else ""), file=sys.stderr, flush=True)
    summary = summarize(results)
    print(markdown(ENV, results, summary, args.budget_s, str(args.config), args.kilorl_override) + "\n", flush=True)
    print("kiloRL env steps/s over training: " + ", ".join(f"seed {s}: {_fmt(v)}" for s, v in sps.items()), flush=True)
    peer = {r.seed: sb3_sps(r) for r in results if r.framework == "SB3"}
    print("SB3-contrib env steps/s after start-up: " + ", ".join(f"seed {s}: {_fmt(v)}" for s, v in peer.items()), flush=True)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        report = {"started_utc": started.isoformat(timespec="seconds"), "command": sys.argv,
                  "runs": [asdict(r) for r in results], "kilorl_sps": sps, "sb3_sps": peer,
                  "summary": {k: asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in summary.items()}}
        args.json_out.write_text(json.dumps(_json_safe(report), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
