"""The peer benchmark's bookkeeping: thresholds, failures in medians, deadlines, config checks.

The training runs themselves are the benchmark (minutes); these check the parts that
decide what the benchmark reports, with real files and real subprocesses.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.benchmarks.bench_modules import BENCH, load_bench

pvp = load_bench("ppo_vs_peers")
zoo = load_bench("zoo_hyperparams")
CARTPOLE = pvp.ENVS["cartpole"]


def _write_metrics(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(steps: int, ret: float | None, episodes: int, train: float, wall: float) -> dict:
    row = {"env_steps": steps, "wall_time": wall, "train_time": train, "startup_s": wall - train, "episodes": episodes}
    if ret is not None:
        row["episode_return_mean"] = ret
    return row


def test_kilorl_threshold_needs_a_full_window(tmp_path: Path) -> None:
    # 5 episodes averaging 500 is not a 20-episode mean; the first full window at 475 counts.
    _write_metrics(tmp_path, [
        _row(512, None, 0, 1.0, 11.0),
        _row(1024, 500.0, 5, 2.0, 12.0),
        _row(4096, 470.0, 25, 5.0, 15.0),
        _row(5120, 476.0, 27, 6.5, 16.5),
    ])
    r = pvp.kilorl_result(CARTPOLE, 3, tmp_path, rc=0, timed_out=False)
    assert (r.reached, r.stop_reason, r.env_steps, r.time_s, r.time_incl_startup_s) == (True, "threshold", 5120, 6.5, 16.5)
    assert r.startup_s == pytest.approx(10.0) and r.final_return_mean == 476.0


@pytest.mark.parametrize(("rc", "timed_out", "reason"), [(0, False, "step_limit"), (-2, True, "budget"), (1, False, "crashed")])
def test_kilorl_run_that_never_reaches_is_a_failure_with_its_reason(
    tmp_path: Path, rc: int, timed_out: bool, reason: str
) -> None:
    _write_metrics(tmp_path, [_row(1024, 200.0, 30, 2.0, 12.0)])
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "stderr.log").write_text("Traceback\nValueError: boom\n")
    r = pvp.kilorl_result(CARTPOLE, 1, tmp_path, rc=rc, timed_out=timed_out)
    assert not r.reached and r.stop_reason == reason and r.time_s is None
    assert (r.error is not None and "boom" in r.error) == (reason == "crashed")


def test_failures_count_as_infinitely_slow_in_medians() -> None:
    R = pvp.RunResult
    results = [
        R("kiloRL", "cartpole", 1, True, "threshold", time_s=10.0, time_incl_startup_s=20.0, env_steps=50_000, startup_s=10.0),
        R("kiloRL", "cartpole", 2, False, "budget", startup_s=12.0),
        R("kiloRL", "cartpole", 3, True, "threshold", time_s=4.0, time_incl_startup_s=14.0, env_steps=30_000, startup_s=10.0),
        R("SB3", "cartpole", 1, True, "threshold", time_s=5.0, time_incl_startup_s=6.0, env_steps=25_000, startup_s=1.0),
        R("SB3", "cartpole", 2, True, "threshold", time_s=8.0, time_incl_startup_s=9.0, env_steps=40_000, startup_s=1.0),
        R("SB3", "cartpole", 3, False, "step_limit", startup_s=1.0),
    ]
    s = pvp.summarize(results)
    # Dropping the failure would give kiloRL a median of 7 s; counting it as +inf gives 10 s.
    assert (s["kiloRL"].reached, s["kiloRL"].median_time_s, s["kiloRL"].median_env_steps) == (2, 10.0, 50_000)
    assert s["kiloRL"].failures == ["seed 2: budget"] and s["kiloRL"].median_startup_s == 10.0
    assert s["SB3"].median_time_s == 8.0 and s["SB3"].failures == ["seed 3: step_limit"]
    assert s["ratio"]["time"] == pytest.approx(10.0 / 8.0)
    assert s["ratio"]["time_incl_startup"] == pytest.approx(20.0 / 9.0)
    assert s["ratio"]["env_steps"] == pytest.approx(50_000 / 40_000)

    sb3_ok = R("SB3", "cartpole", 1, True, "threshold", time_s=5.0, time_incl_startup_s=6.0, env_steps=1)
    mostly_failed = pvp.summarize([R("kiloRL", "cartpole", i, False, "budget") for i in range(2)] + [sb3_ok])
    assert math.isinf(mostly_failed["kiloRL"].median_time_s) and mostly_failed["ratio"]["time"] is None
    assert mostly_failed["ratio_bound"]["time"] is None  # no kiloRL success: nothing to bound with
    assert s["ratio_bound"] == {"time": None, "time_incl_startup": None, "env_steps": None}  # both medians known
    table = pvp.markdown(CARTPOLE, results, s, 600)
    assert "| kiloRL | 2/3 | 10.0 |" in table and "kiloRL did not reach the threshold: seed 2: budget" in table
    assert json.loads(json.dumps(pvp._json_safe({"m": math.inf, "l": [math.nan, 1.5]}))) == {"m": None, "l": [None, 1.5]}


def test_an_unreached_median_still_bounds_the_ratio() -> None:
    R = pvp.RunResult
    kilo = [R("kiloRL", "lunarlander", i, True, "threshold", time_s=t, time_incl_startup_s=t + 8, env_steps=n)
            for i, t, n in ((1, 112.5, 462_848), (2, 23.8, 282_624), (3, 37.3, 327_680))]
    sb3 = [R("SB3", "lunarlander", 1, False, "budget"), R("SB3", "lunarlander", 2, False, "step_limit"),
           R("SB3", "lunarlander", 3, True, "threshold", time_s=614.6, time_incl_startup_s=615.6, env_steps=870_384)]
    s = pvp.summarize(kilo + sb3)
    assert s["ratio"]["time"] is None
    assert s["ratio_bound"]["time"] == "<= 0.0607" and s["ratio_bound"]["env_steps"] == "<= 0.376"
    assert "| **ratio kiloRL/SB3** | | **<= 0.0607** |" in pvp.markdown(pvp.ENVS["lunarlander"], kilo + sb3, s, 900)
    swapped = [R("kiloRL", r.env, r.seed, r.reached, r.stop_reason, time_s=r.time_s, env_steps=r.env_steps) for r in sb3]
    swapped += [R("SB3", r.env, r.seed, True, "threshold", time_s=r.time_s, env_steps=r.env_steps) for r in kilo]
    mirrored = pvp.summarize(swapped)
    assert mirrored["ratio_bound"]["time"] == f">= {614.6 / 37.3:.3g}"


def test_deadline_interrupts_the_run_and_reaps_escaped_descendants(tmp_path: Path) -> None:
    # The child leaves the process group (as a daemon could), so only pid tracking finds it.
    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time\n"
              "c = subprocess.Popen(['sleep', '120'], start_new_session=True)\n"
              f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
              "time.sleep(120)\n")
    t0 = time.time()
    rc, timed_out, leaked = pvp.run_with_deadline([sys.executable, "-c", script], tmp_path / "logs", t0 + 2.0,
                                                  grace_s=5.0, reap_wait_s=0.5)
    assert timed_out and rc != 0 and leaked == 1
    assert time.time() - t0 < 20
    child = int(pid_file.read_text())
    deadline = time.time() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_run_that_finishes_in_time_is_not_timed_out(tmp_path: Path) -> None:
    rc, timed_out, leaked = pvp.run_with_deadline([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path, time.time() + 60)
    assert (rc, timed_out, leaked) == (3, False, 0)


def test_config_check_names_the_problem(tmp_path: Path) -> None:
    assert "not found" in pvp.check_config(CARTPOLE, tmp_path / "missing.yaml")
    other = tmp_path / "pendulum.yaml"
    other.write_text("env:\n  id: Pendulum-v1\n")
    assert "trains Pendulum-v1, not CartPole-v1" in pvp.check_config(CARTPOLE, other)
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  id: CartPole-v1\nalgo:\n  lr: fast\n")
    assert "algo.lr" in pvp.check_config(CARTPOLE, bad)
    example = BENCH.parent / CARTPOLE.default_config
    assert pvp.check_config(CARTPOLE, example) is None
    assert "algo.update_epochs" in pvp.check_config(CARTPOLE, example, ["algo.update_epochs=0"])


def test_missing_lunarlander_config_is_skipped_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = pvp.main(["--envs", "lunarlander", "--seeds", "1", "--lunarlander-config", str(tmp_path / "none.yaml"),
                     "--json-out", str(out), "--work-dir", str(tmp_path / "w")])
    assert code == 0
    assert "skipping LunarLander-v3" in capsys.readouterr().out
    assert "not found" in json.loads(out.read_text())["envs"]["lunarlander"]["skipped"]


def test_cli_arguments() -> None:
    assert pvp.parse_seeds("3") == [1, 2, 3] and pvp.parse_seeds("4,9") == [4, 9]
    assert pvp.parse_envs("cartpole, lunarlander") == ["cartpole", "lunarlander"]
    with pytest.raises(argparse.ArgumentTypeError, match="allowed: cartpole, lunarlander"):
        pvp.parse_envs("pong")
    assert pvp.parse_frameworks("SB3") == ["SB3"]
    with pytest.raises(argparse.ArgumentTypeError, match="allowed: kiloRL, SB3"):
        pvp.parse_frameworks("rllib")
    with pytest.raises(argparse.ArgumentTypeError, match="--seeds"):
        pvp.parse_seeds("three")


def test_zoo_linear_schedules_decay_to_zero() -> None:
    kwargs = zoo.resolve_schedules(zoo.ZOO_PPO["CartPole-v1"].algo_kwargs)
    assert kwargs["learning_rate"](1.0) == pytest.approx(1e-3) and kwargs["learning_rate"](0.25) == pytest.approx(2.5e-4)
    assert kwargs["clip_range"](0.0) == 0.0 and kwargs["n_steps"] == 32
