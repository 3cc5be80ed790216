"""kiloRL PPO vs Stable-Baselines3 PPO: time and env steps to a return threshold.

For each env and seed this runs ``kilorl train`` (the example config) and SB3 PPO with
rl-zoo's hyperparameters (``zoo_hyperparams.py``), each in its own subprocess with a
wall-clock budget, alternating the order (kiloRL first on odd-numbered pairs, SB3 first
on even ones) so load from other jobs on the machine hits both sides. A run "reaches"
the threshold when the mean return of its last 20 finished training episodes first gets
there (475 CartPole-v1, 200 LunarLander-v3); both sides stop right there.

Reported per env and framework: how many runs reached it; median time to it, both
excluding start-up (kiloRL: ``train_time``, from the first rollout; SB3: from
``learn``'s training start) and including it (kiloRL: ``wall_time``, Ray start-up
included; SB3: env + model construction included); median env steps to it; median
start-up; and the kiloRL/SB3 ratios of the medians. A run that does not reach the
threshold (budget, its config's step limit, or a crash) counts as infinitely slow in
the medians, so failures can only make a framework look worse, never vanish.

Both sides use one torch thread (kiloRL's ``train.torch_threads=1``; SB3 worker calls
``torch.set_num_threads(1)``) and OMP/MKL_NUM_THREADS=1. kiloRL runs its roles as Ray
actors (one env actor and one learner process) while SB3 is a single process.

    python benchmarks/ppo_vs_peers.py --envs cartpole --seeds 3 --json-out bench.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WINDOW = 20
FRAMEWORKS = ("kiloRL", "SB3")


@dataclass(frozen=True)
class BenchEnv:
    """One environment of the benchmark."""

    key: str
    """Name used on the command line (``--envs``)."""
    gym_id: str
    """Gymnasium id both frameworks train on."""
    threshold: float
    """Rolling-mean return that counts as solved."""
    budget_s: float
    """Default wall-clock budget of one run (process launch to kill)."""
    default_config: str
    """kiloRL example config, relative to the repository root."""


ENVS: dict[str, BenchEnv] = {
    "cartpole": BenchEnv("cartpole", "CartPole-v1", 475.0, 600.0, "examples/cartpole_ppo.yaml"),
    "lunarlander": BenchEnv("lunarlander", "LunarLander-v3", 200.0, 900.0, "examples/lunarlander_ppo.yaml"),
}


@dataclass
class RunResult:
    """What one run measured; ``time_s``/``env_steps`` are None when it did not reach."""

    framework: str
    env: str
    seed: int
    reached: bool
    stop_reason: str
    """threshold | budget | step_limit (the run's own env-step limit) | crashed."""
    time_s: float | None = None
    """Seconds to the threshold excluding start-up."""
    time_incl_startup_s: float | None = None
    """Seconds to the threshold including start-up (Ray start for kiloRL)."""
    env_steps: int | None = None
    startup_s: float | None = None
    env_steps_total: int | None = None
    final_return_mean: float | None = None
    process_wall_s: float = 0.0
    """Launch to exit of the subprocess (imports, start-up, training, shutdown)."""
    leaked_processes: int = 0
    """Descendants still alive 10 s after the run's process exited (killed by us)."""
    error: str | None = None
    run_dir: str | None = None


# --------------------------------------------------------------------------------------
# Subprocesses with a deadline; every descendant is tracked by pid and reaped.
def run_with_deadline(cmd: list[str], log_dir: Path, deadline: float, grace_s: float = 30.0,
                      reap_wait_s: float = 10.0, extra_env: dict[str, str] | None = None) -> tuple[int, bool, int]:
    """Run ``cmd`` until it exits or ``deadline``; returns (returncode, timed_out, leaked).

    On the deadline the process group gets SIGINT (kilorl's trainer then shuts Ray down
    in its ``finally``), SIGKILL after ``grace_s``. Descendants (Ray's raylet, workers)
    are recorded while the run lives, so any left behind are found and killed by pid.
    """
    import psutil

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "stdout.log").open("wb") as out, (log_dir / "stderr.log").open("wb") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
    seen: dict[int, psutil.Process] = {}
    timed_out = False
    try:
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                for child in root.children(recursive=True):
                    seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
            if time.time() >= deadline and not timed_out:
                timed_out = True
                _signal_group(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait()
                break
            time.sleep(0.25)
    except BaseException:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        leaked = _reap(list(seen.values()), reap_wait_s)
    return proc.returncode, timed_out, leaked


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _reap(procs: list[Any], wait_s: float = 10.0) -> int:
    """Give recorded descendants ``wait_s`` to exit on their own, then kill the rest by pid."""
    import psutil

    def running(p: Any) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.time() + wait_s
    alive = [p for p in procs if running(p)]
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if running(p)]
    for p in alive:
        try:
            p.kill()  # is_running() compared create times: this is the same process.
        except psutil.Error:
            pass
    return len(alive)


# --------------------------------------------------------------------------------------
def run_kilorl(env: BenchEnv, config: Path, seed: int, budget_s: float, work: Path,
               overrides: list[str] = ()) -> RunResult:
    run_dir = _fresh(work / f"{env.key}-kilorl-seed{seed}")
    cmd = [
        sys.executable, "-m", "kilorl.cli.main", "train", str(config), "--run-dir", str(run_dir), "--seed", str(seed),
        "-o", f"train.stop_return={env.threshold}", "-o", f"logging.return_window={WINDOW}",
        "-o", "train.torch_threads=1", "-o", "logging.report_every_s=0.2",
        "-o", "logging.progress=false", "-o", "logging.tensorboard=false",
        *(arg for o in overrides for arg in ("-o", o)),
    ]
    # Ray's ray.init() without an address joins the newest `ray start` cluster on the machine
    # (/tmp/ray/ray_current_cluster), e.g. another user's; "local" always starts a private one.
    ray_env = {} if os.environ.get("RAY_ADDRESS") else {"RAY_ADDRESS": "local"}
    t0 = time.time()
    rc, timed_out, leaked = run_with_deadline(cmd, run_dir / "logs", t0 + budget_s, extra_env=ray_env)
    result = kilorl_result(env, seed, run_dir, rc, timed_out)
    result.process_wall_s, result.leaked_processes = time.time() - t0, leaked
    return result


def run_kilorl_evaluated(env: BenchEnv, config: Path, seed: int, budget_s: float, work: Path, overrides: list[str],
                         read: Callable[[int, Path, int, bool], RunResult]) -> RunResult:
    """``kilorl train`` with the run's own evaluations deciding (``overrides`` set them up);
    ``read(seed, run_dir, rc, timed_out)`` turns the run's rows into its result (the DQN and
    SAC comparisons)."""
    run_dir = _fresh(work / f"{env.key}-kilorl-seed{seed}")
    cmd = [sys.executable, "-m", "kilorl.cli.main", "train", str(config), "--run-dir", str(run_dir), "--seed", str(seed),
           "-o", "train.torch_threads=1", "-o", "logging.progress=false", "-o", "logging.tensorboard=false",
           *(arg for o in overrides for arg in ("-o", o))]
    ray_env = {} if os.environ.get("RAY_ADDRESS") else {"RAY_ADDRESS": "local"}
    t0 = time.time()
    rc, timed_out, leaked = run_with_deadline(cmd, run_dir / "logs", t0 + budget_s, extra_env=ray_env)
    result = read(seed, run_dir, rc, timed_out)
    result.process_wall_s, result.leaked_processes = time.time() - t0, leaked
    return result


def kilorl_result(env: BenchEnv, seed: int, run_dir: Path, rc: int, timed_out: bool) -> RunResult:
    """Read the run's metrics.jsonl: the first report with a full window at the threshold.

    Every report is written when it happens and the run is killed at its deadline, so a
    report that exists was made within the budget.
    """
    rows = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    base = RunResult("kiloRL", env.key, seed, reached=False, stop_reason="", run_dir=str(run_dir))
    if rows:
        last = rows[-1]
        base.startup_s = last.get("startup_s")
        base.env_steps_total = last.get("env_steps")
        base.final_return_mean = last.get("episode_return_mean")
    hit = next((r for r in rows if r.get("episodes", 0) >= WINDOW and r.get("episode_return_mean") is not None
                and r["episode_return_mean"] >= env.threshold), None)
    if hit is not None:
        base.reached, base.stop_reason = True, "threshold"
        base.time_s, base.time_incl_startup_s, base.env_steps = hit["train_time"], hit["wall_time"], hit["env_steps"]
    elif timed_out:
        base.stop_reason = "budget"
    elif rc == 0:
        base.stop_reason = "step_limit"
    else:
        base.stop_reason = "crashed"
    if rc != 0 and not timed_out:
        base.error = f"exit code {rc}: " + _tail(run_dir / "logs" / "stderr.log")
    return base


def run_sb3(env: BenchEnv, seed: int, budget_s: float, work: Path, algo: str = "ppo") -> RunResult:
    run_dir = _fresh(work / f"{env.key}-sb3-seed{seed}")
    out = run_dir / "result.json"
    t0 = time.time()
    cmd = [sys.executable, str(HERE / "sb3_worker.py"), "--env", env.gym_id, "--seed", str(seed),
           "--threshold", str(env.threshold), "--window", str(WINDOW), "--deadline", str(t0 + budget_s),
           "--out", str(out), "--algo", algo]
    # The worker stops itself at the deadline; the hard kill is only a safety net.
    rc, timed_out, leaked = run_with_deadline(cmd, run_dir / "logs", t0 + budget_s + 60.0)
    result = RunResult("SB3", env.key, seed, reached=False, stop_reason="crashed", run_dir=str(run_dir))
    if rc == 0 and out.is_file():
        data = json.loads(out.read_text())
        result = RunResult("SB3", env.key, seed, reached=data["reached"], stop_reason=data["stop_reason"],
                           time_s=data.get("time_s"), time_incl_startup_s=data.get("time_incl_startup_s"),
                           env_steps=data.get("env_steps"), startup_s=data["startup_s"],
                           env_steps_total=data["env_steps_total"], final_return_mean=data["final_return_mean"],
                           run_dir=str(run_dir))
    else:
        result.stop_reason = "budget" if timed_out else "crashed"
        result.error = f"exit code {rc}: " + _tail(run_dir / "logs" / "stderr.log")
    result.process_wall_s, result.leaked_processes = time.time() - t0, leaked
    return result


def _fresh(run_dir: Path) -> Path:
    """An empty run directory: kiloRL appends to metrics.jsonl, so old rows must not linger."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    return run_dir


def _tail(path: Path, lines: int = 5) -> str:
    if not path.is_file():
        return "(no stderr)"
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])


# --------------------------------------------------------------------------------------
def median_or_inf(values: list[float | None]) -> float:
    """Median where a missing value (did not reach) counts as +inf; inf when empty."""
    finite = [math.inf if v is None else float(v) for v in values]
    return statistics.median(finite) if finite else math.inf


def ratio(a: float, b: float) -> float | None:
    if math.isinf(a) or math.isinf(b) or b <= 0:
        return None
    return a / b


def ratio_bound(k_values: list[float | None], s_values: list[float | None]) -> str | None:
    """When only one median is 'not reached', a bound on the ratio of medians.

    A median is at least the smallest value it is taken over, so with SB3's median
    unreached kiloRL/SB3 <= kiloRL median / SB3's fastest success (and the mirror image).
    """
    k_med, s_med = median_or_inf(k_values), median_or_inf(s_values)
    k_done, s_done = [v for v in k_values if v is not None], [v for v in s_values if v is not None]
    if math.isfinite(k_med) and math.isinf(s_med) and s_done:
        return f"<= {k_med / min(s_done):.3g}"
    if math.isinf(k_med) and math.isfinite(s_med) and k_done and s_med > 0:
        return f">= {min(k_done) / s_med:.3g}"
    return None


@dataclass
class FrameworkSummary:
    runs: int
    reached: int
    median_time_s: float
    median_time_incl_startup_s: float
    median_env_steps: float
    median_startup_s: float | None
    failures: list[str] = field(default_factory=list)
    """``seed N: reason`` for every run that did not reach the threshold."""


def summarize(results: list[RunResult]) -> dict[str, Any]:
    """Per-framework medians (failures as +inf) and the kiloRL/SB3 ratios."""
    out: dict[str, Any] = {}
    for fw in FRAMEWORKS:
        rs = [r for r in results if r.framework == fw]
        if not rs:
            continue
        startups = [r.startup_s for r in rs if r.startup_s is not None]
        out[fw] = FrameworkSummary(
            runs=len(rs), reached=sum(r.reached for r in rs),
            median_time_s=median_or_inf([r.time_s for r in rs]),
            median_time_incl_startup_s=median_or_inf([r.time_incl_startup_s for r in rs]),
            median_env_steps=median_or_inf([r.env_steps for r in rs]),
            median_startup_s=statistics.median(startups) if startups else None,
            failures=[f"seed {r.seed}: {r.stop_reason}" + (f" ({r.error})" if r.error else "") for r in rs if not r.reached],
        )
    if all(fw in out for fw in FRAMEWORKS):
        k, s = out["kiloRL"], out["SB3"]
        out["ratio"] = {
            "time": ratio(k.median_time_s, s.median_time_s),
            "time_incl_startup": ratio(k.median_time_incl_startup_s, s.median_time_incl_startup_s),
            "env_steps": ratio(k.median_env_steps, s.median_env_steps),
        }
        ks, ss = [r for r in results if r.framework == "kiloRL"], [r for r in results if r.framework == "SB3"]
        out["ratio_bound"] = {
            name: ratio_bound([getattr(r, attr) for r in ks], [getattr(r, attr) for r in ss])
            for name, attr in (("time", "time_s"), ("time_incl_startup", "time_incl_startup_s"), ("env_steps", "env_steps"))
        }
    return out


def _fmt(v: float | None, digits: int = 1, thousands: bool = False) -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "not reached"
    return f"{v:,.0f}" if thousands else f"{v:.{digits}f}"


def markdown(env: BenchEnv, results: list[RunResult], summary: dict[str, Any], budget_s: float,
             kilorl_config: str = "", overrides: list[str] = (), peer: str = "rl-zoo PPO entry",
             rule: str | None = None) -> str:
    """The run's tables; ``rule`` names the threshold rule in the heading (default: the rolling mean)."""
    seeds = sorted({r.seed for r in results})
    rule = rule or f"a {WINDOW}-episode rolling mean of {env.threshold:g}"
    lines = [
        f"### {env.gym_id}: time to {rule}",
        f"seeds {', '.join(map(str, seeds))}; budget {budget_s:g} s per run; medians count runs that "
        f"did not reach the threshold as infinitely slow.",
        f"kiloRL: `{kilorl_config}`" + "".join(f" `-o {o}`" for o in overrides) + f"; SB3: {peer}.",
        "",
        "| framework | reached | median time (s), excl. start-up | median time (s), incl. start-up "
        "| median env steps | median start-up (s) |",
        "|---|---|---|---|---|---|",
    ]
    for fw in FRAMEWORKS:
        if fw in summary:
            s = summary[fw]
            lines.append(f"| {fw} | {s.reached}/{s.runs} | {_fmt(s.median_time_s)} | {_fmt(s.median_time_incl_startup_s)} "
                         f"| {_fmt(s.median_env_steps, thousands=True)} | {_fmt(s.median_startup_s)} |")
    if "ratio" in summary:
        r, bound = summary["ratio"], summary["ratio_bound"]
        cell = {k: bound[k] if r[k] is None and bound[k] else _fmt(r[k], 2) for k in r}
        lines.append(f"| **ratio kiloRL/SB3** | | **{cell['time']}** | {cell['time_incl_startup']} | {cell['env_steps']} | |")
    lines += ["", "| run | framework | seed | reached | time (s) excl. / incl. start-up | env steps "
              "| env steps/s to threshold | start-up (s) | stop | last return mean |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        sps = r.env_steps / r.time_s if r.env_steps and r.time_s else None
        lines.append(f"| {i} | {r.framework} | {r.seed} | {'yes' if r.reached else 'NO'} "
                     f"| {_fmt(r.time_s)} / {_fmt(r.time_incl_startup_s)} | {_fmt(r.env_steps, thousands=True)} "
                     f"| {_fmt(sps, thousands=True)} | {_fmt(r.startup_s)} | {r.stop_reason} | {_fmt(r.final_return_mean)} |")
    for fw in FRAMEWORKS:
        if fw in summary:
            lines += [f"\n- {fw} did not reach the threshold: {failure}" for failure in summary[fw].failures]
    leaked = sum(r.leaked_processes for r in results)
    if leaked:
        lines.append(f"\n- {leaked} process(es) outlived their run by 10 s and were killed (see JSON).")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
def parse_seeds(text: str) -> list[int]:
    """``3`` -> seeds 1, 2, 3; ``1,5,9`` -> exactly those."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        else:
            seeds = list(range(1, int(text) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds: expected a count (3) or a list (1,5,9), got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds: need at least one seed")
    return seeds


def parse_frameworks(text: str) -> list[str]:
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names or any(n not in FRAMEWORKS for n in names):
        raise argparse.ArgumentTypeError(f"--frameworks: got {text!r}; allowed: {', '.join(FRAMEWORKS)}")
    return names


def parse_envs(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ENVS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(f"--envs: unknown {unknown or text!r}; allowed: {', '.join(ENVS)}")
    return keys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=parse_envs, default=list(ENVS), help=f"comma list of {', '.join(ENVS)}")
    p.add_argument("--seeds", type=parse_seeds, default=parse_seeds("3"), help="count (3 = seeds 1..3) or list 1,5,9")
    p.add_argument("--frameworks", type=parse_frameworks, default=list(FRAMEWORKS),
                   help="comma list of kiloRL, SB3 (one alone: no ratio; handy when tuning a config)")
    p.add_argument("--budget-s", type=float, help="wall-clock budget per run, seconds "
                   f"(default: {', '.join(f'{e.key} {e.budget_s:g}' for e in ENVS.values())})")
    for e in ENVS.values():
        p.add_argument(f"--{e.key}-config", type=Path, default=REPO / e.default_config,
                       help=f"kiloRL config for {e.gym_id} (default {e.default_config})")
    p.add_argument("--kilorl-override", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="extra -o override for every kiloRL run (repeatable; recorded in the JSON)")
    p.add_argument("--json-out", type=Path, help="write all runs and summaries here as JSON")
    p.add_argument("--no-bare-ray", action="store_true",
                   help="skip the bare ray.init() + first actor baseline measured before each seed's pair")
    p.add_argument("--work-dir", type=Path, help="where run directories go (default runs/ppo_vs_peers/<time>)")
    return p


def check_config(env: BenchEnv, path: Path, overrides: list[str] = ()) -> str | None:
    """None when ``path`` is a valid kiloRL config for ``env``; otherwise why not."""
    from kilorl.config import ConfigError, load_config

    if not path.is_file():
        return f"kiloRL config {path} not found"
    try:
        cfg = load_config(str(path), list(overrides))
    except (ConfigError, FileNotFoundError) as err:
        return f"kiloRL config {path} is invalid: {err}"
    if cfg.env.id != env.gym_id:
        return f"kiloRL config {path} trains {cfg.env.id}, not {env.gym_id}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.budget_s is not None and args.budget_s <= 0:
        print("error: --budget-s must be positive", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    work = args.work_dir or REPO / "runs" / "ppo_vs_peers" / started.strftime("%Y%m%d-%H%M%S")
    report: dict[str, Any] = {"started_utc": started.isoformat(timespec="seconds"), "command": sys.argv,
                              "cpu_count": os.cpu_count(), "window": WINDOW, "envs": {}}
    for key in args.envs:
        env = ENVS[key]
        config = getattr(args, f"{key}_config")
        problem = check_config(env, config, args.kilorl_override)
        if problem:
            print(f"skipping {env.gym_id}: {problem}\n", flush=True)
            report["envs"][key] = {"skipped": problem}
            continue
        budget = args.budget_s or env.budget_s
        results: list[RunResult] = []
        bare: list[float] = []
        for i, seed in enumerate(args.seeds):
            if "kiloRL" in args.frameworks and not args.no_bare_ray:
                bare.append(bare_ray()["ray_s"])  # the baseline start-up, measured between the pairs
            order = ("kiloRL", "SB3") if i % 2 == 0 else ("SB3", "kiloRL")
            for fw in (f for f in order if f in args.frameworks):
                print(f"[{datetime.now(UTC):%H:%M:%S}] {env.gym_id} {fw} seed {seed} ...", file=sys.stderr, flush=True)
                if fw == "kiloRL":
                    r = run_kilorl(env, config, seed, budget, work, args.kilorl_override)
                else:
                    r = run_sb3(env, seed, budget, work)
                results.append(r)
                print(f"    reached={r.reached} time_s={_fmt(r.time_s)} steps={_fmt(r.env_steps, thousands=True)} "
                      f"stop={r.stop_reason}" + (f" error={r.error}" if r.error else ""), file=sys.stderr, flush=True)
        summary = summarize(results)
        print(markdown(env, results, summary, budget, _shown(config), args.kilorl_override) + "\n", flush=True)
        startup = startup_goal(summary, bare) if bare else None
        if startup:
            print(startup["line"] + "\n", flush=True)
        report["envs"][key] = {
            "gym_id": env.gym_id, "threshold": env.threshold, "budget_s": budget, "kilorl_config": _shown(config),
            "kilorl_overrides": args.kilorl_override,
            "runs": [asdict(r) for r in results], "bare_ray_startup_s": bare,
            "startup_goal": startup,
            "summary": {k: asdict(v) if isinstance(v, FrameworkSummary) else v for k, v in summary.items()},
        }
        if key == "cartpole" and summary.get("ratio", {}).get("time") is not None:
            met = summary["ratio"]["time"] <= 0.6
            print(f"Goal: kiloRL/SB3 median time ratio <= 0.6 on CartPole (excl. start-up): "
                  f"{'met' if met else 'NOT met'} ({summary['ratio']['time']:.2f}).\n", flush=True)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(_json_safe(report), indent=2) + "\n")
    return 0


def bare_ray() -> dict[str, float]:
    """``ray.init()`` + one trivial actor in a fresh process (``startup_breakdown.py``'s baseline)."""
    sys.path.insert(0, str(HERE))
    try:
        from startup_breakdown import bare_ray as measure
    finally:
        sys.path.remove(str(HERE))
    return measure()


def startup_goal(summary: dict[str, Any], bare: list[float]) -> dict[str, Any] | None:
    """The issue's start-up goal: kiloRL's median start-up <= bare Ray's median + 1.5 s."""
    k = summary.get("kiloRL")
    if k is None or k.median_startup_s is None or not bare:
        return None
    base = statistics.median(bare)
    met = k.median_startup_s <= base + 1.5
    line = (f"Start-up: kiloRL median {k.median_startup_s:.2f} s vs bare ray.init() + first actor median {base:.2f} s "
            f"(same run, {len(bare)} measurements): excess {k.median_startup_s - base:+.2f} s, goal <= +1.5 s "
            f"{'met' if met else 'NOT met'}.")
    return {"kilorl_median_s": k.median_startup_s, "bare_ray_median_s": base, "met": met, "line": line}


def _shown(path: Path) -> str:
    """A config path as the reader would type it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _json_safe(value: Any) -> Any:
    """JSON has no infinity: a median of 'not reached' becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
