"""PPO with 2 learners under each gradient-compression setting, side by side.

    python benchmarks/compression_bench.py --envs cartpole,lunarlander --seeds 1,2,3
    python benchmarks/compression_bench.py --envs cartpole --seeds 1 --settings dense,topk_user --dry-run
    python benchmarks/compression_bench.py ... | grep '^{' >> runs.jsonl   # one JSON line per finished run
    python benchmarks/compression_bench.py --summarise runs.jsonl

Per (env, setting, seed): bytes on the wire per update (mean ``comm_bytes_sent`` against
``comm_bytes_dense`` from ``metrics.jsonl``), final training return, deterministic eval
over 20 episodes, and wall time / env steps until the rolling return first reaches the
env's threshold. Then a markdown table of medians per (env, setting), with the goal of
the issue checked: >= 70% fewer bytes than dense, returns within 5% of dense.

Needs the learners to read the ``compression`` config section and report the comm
metrics (the learner wiring of issue 11); without it the script stops with that message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THRESHOLDS = {"cartpole": 475.0, "lunarlander": 200.0}
SETTINGS: dict[str, list[str]] = {
    "dense": ["compression.method=none"],
    "topk_user": ["compression.method=threshold_topk", "compression.threshold=1e-4", "compression.topk_ratio=0.3"],
    "topk_sparse": ["compression.method=threshold_topk", "compression.threshold=1e-4", "compression.topk_ratio=0.05"],
    "topk_no_ef": ["compression.method=threshold_topk", "compression.threshold=1e-4", "compression.topk_ratio=0.3",
                   "compression.error_feedback=false"],
    "powersgd": ["compression.method=powersgd", "compression.powersgd_rank=2"],
    "bf16": ["compression.method=bf16"],
}
COMMON = ["parallelism.learner=2", "logging.progress=false"]


def parallelism_overrides(example: Path) -> list[str]:
    """Two learners need an even number of actors; keep the example's total env count."""
    import yaml

    par = (yaml.safe_load(example.read_text()) or {}).get("parallelism", {})
    actors, envs = par.get("actor", 1), par.get("envs_per_actor", 1)
    total = actors * envs
    new_actors = actors + actors % 2
    if total % new_actors:
        raise ValueError(f"{example.name}: {total} envs do not split over {new_actors} actors")
    return [f"parallelism.actor={new_actors}", f"parallelism.envs_per_actor={total // new_actors}"]


def _cli(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kilorl.cli.main", *args], capture_output=capture, text=True)


def check_wiring() -> None:
    """Fail early, and say why, when the config has no ``compression`` section yet."""
    probe = (
        "from kilorl.config import load_config\n"
        "import sys\n"
        "cfg = load_config(sys.argv[1])\n"
        "assert hasattr(cfg, 'compression'), 'no compression section'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(REPO / "examples" / "cartpole_ppo.yaml")],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("compression_bench needs the learner wiring of issue 11 (config section `compression`, comm metrics "
                 f"in metrics.jsonl); not there yet:\n{done.stderr.strip().splitlines()[-1] if done.stderr else ''}")


def time_to_threshold(rows: list[dict], threshold: float) -> tuple[float | None, int | None]:
    for r in rows:
        ret = r.get("episode_return_mean")
        if ret is not None and ret >= threshold:
            return r.get("train_time", r.get("wall_time")), r["env_steps"]
    return None, None


def run_one(env: str, setting: str, seed: int, out_root: Path) -> dict:
    run_dir = out_root / f"{env}-{setting}-s{seed}"
    example = REPO / "examples" / f"{env}_ppo.yaml"
    overrides = COMMON + parallelism_overrides(example) + SETTINGS[setting]
    cmd = ["train", str(example), "--seed", str(seed), "--run-dir", str(run_dir), *sum((["-o", o] for o in overrides), [])]
    t0 = time.time()
    done = _cli(*cmd)
    if done.returncode != 0:
        raise RuntimeError(f"kilorl {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    comm = [r for r in rows if "comm_bytes_sent" in r]
    if not comm:
        raise RuntimeError(f"{run_dir}/metrics.jsonl has no comm_bytes_sent: the learners do not report comm metrics")
    ev = _cli("eval", str(run_dir), "--episodes", "20", "--json")
    score = json.loads(ev.stdout.strip().splitlines()[-1])
    tt_s, tt_steps = time_to_threshold(rows, THRESHOLDS[env])
    return {
        "env": env, "setting": setting, "seed": seed, "env_steps": rows[-1]["env_steps"],
        "bytes_sent_per_update": statistics.mean(r["comm_bytes_sent"] for r in comm),
        "bytes_dense_per_update": statistics.mean(r["comm_bytes_dense"] for r in comm),
        "train_return": rows[-1].get("episode_return_mean"), "eval_mean": score["episode_return_mean"],
        "time_to_threshold_s": tt_s, "steps_to_threshold": tt_steps, "process_s": time.time() - t0,
    }


def summarise(results: list[dict]) -> str:
    lines = ["| env | setting | bytes/update (vs dense) | eval return (median of seeds) | vs dense | "
             "time to threshold s | steps to threshold | goal met |", "|---|---|---|---|---|---|---|---|"]
    for env in dict.fromkeys(r["env"] for r in results):
        group = {s: [r for r in results if r["env"] == env and r["setting"] == s] for s in SETTINGS}
        dense_ret = statistics.median(r["eval_mean"] for r in group["dense"]) if group["dense"] else None
        for setting, rs in group.items():
            if not rs:
                continue
            sent = statistics.median(r["bytes_sent_per_update"] for r in rs)
            dense = statistics.median(r["bytes_dense_per_update"] for r in rs)
            ret = statistics.median(r["eval_mean"] for r in rs)
            tts = [r["time_to_threshold_s"] for r in rs if r["time_to_threshold_s"] is not None]
            steps = [r["steps_to_threshold"] for r in rs if r["steps_to_threshold"] is not None]
            rel = (ret - dense_ret) / abs(dense_ret) if dense_ret else None
            goal = sent <= 0.3 * dense and rel is not None and rel >= -0.05
            lines.append(
                f"| {env} | {setting} | {sent:,.0f} ({sent / dense:.1%}) | {ret:.1f} | "
                f"{'' if rel is None else f'{rel:+.1%}'} | {f'{statistics.median(tts):.1f}' if tts else '-'} "
                f"({len(tts)}/{len(rs)}) | {f'{statistics.median(steps):,.0f}' if steps else '-'} | {'yes' if goal else 'no'} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default="cartpole,lunarlander")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--out", default="runs/compression-bench")
    ap.add_argument("--json-out")
    ap.add_argument("--dry-run", action="store_true", help="print the training commands and exit")
    ap.add_argument("--summarise", metavar="JSONL", type=Path,
                    help="print the table of results saved earlier (one JSON line per run, as printed) and exit")
    args = ap.parse_args()
    if args.summarise:
        print(summarise([json.loads(x) for x in args.summarise.read_text().splitlines() if x.strip()]))
        return 0
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        ap.error(f"unknown --settings {unknown}; choose from {', '.join(SETTINGS)}")
    jobs = [(e, s, int(seed)) for e in args.envs.split(",") for s in settings for seed in args.seeds.split(",")]
    if args.dry_run:
        for env, setting, seed in jobs:
            extra = COMMON + parallelism_overrides(REPO / "examples" / f"{env}_ppo.yaml") + SETTINGS[setting]
            print("kilorl train", f"examples/{env}_ppo.yaml --seed {seed}", *(f"-o {o}" for o in extra))
        return 0
    check_wiring()
    results = []
    for env, setting, seed in jobs:
        r = run_one(env, setting, seed, Path(args.out))
        results.append(r)
        print(json.dumps(r), flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    print(summarise(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
