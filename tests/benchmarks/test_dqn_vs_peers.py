"""The DQN peer benchmark's bookkeeping: both sides on the same rl-zoo values, alternation,
the goal verdict, the config check. The training runs themselves are the benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kilorl.config import load_config
from tests.benchmarks.bench_modules import BENCH, load_bench

dvp = load_bench("dqn_vs_peers")
pvp = load_bench("ppo_vs_peers")
zoo = load_bench("zoo_hyperparams")
EXAMPLE = BENCH.parent / "examples" / "cartpole_dqn.yaml"


def test_the_example_and_sb3_run_the_same_rl_zoo_values() -> None:
    entry = zoo.ZOO_DQN["CartPole-v1"]
    kw = entry.algo_kwargs
    cfg = load_config(str(EXAMPLE))
    a = cfg.algo
    assert (entry.n_timesteps, cfg.train.total_env_steps) == (50_000, 50_000)
    assert (kw["learning_rate"], a.lr) == (2.3e-3, 2.3e-3)
    assert kw["batch_size"] == a.batch_size == 64 and kw["buffer_size"] == a.buffer_size == 100_000
    assert kw["learning_starts"] == a.learning_starts == 1000 and kw["gamma"] == a.gamma == 0.99
    assert kw["target_update_interval"] == a.target_update_interval == 10
    assert kw["train_freq"] == a.train_freq == 256 and kw["gradient_steps"] == a.gradient_steps == 128
    assert kw["exploration_fraction"] == a.exploration_fraction == 0.16
    assert kw["exploration_final_eps"] == a.exploration_final_eps == 0.04
    assert entry.policy_kwargs["net_arch"] == list(cfg.model.hidden_sizes) == [256, 256]
    assert entry.n_envs == 1 and not entry.normalize


def test_pairs_alternate_who_goes_first() -> None:
    assert [dvp.pair_order(i) for i in range(4)] == [("kiloRL", "SB3"), ("SB3", "kiloRL")] * 2


def test_evaluation_is_off_unless_kept_and_user_overrides_come_last() -> None:
    assert dvp.kilorl_overrides(["algo.lr=1e-3"], keep_evaluation=False) == [*dvp.NO_EVALUATION, "algo.lr=1e-3"]
    assert dvp.kilorl_overrides([], keep_evaluation=True) == []
    cfg = load_config(str(EXAMPLE), dvp.kilorl_overrides([], keep_evaluation=False))
    assert cfg.evaluation.every_env_steps is None and not cfg.evaluation.keep_best


def test_config_check_refuses_a_non_dqn_config(tmp_path: Path) -> None:
    assert dvp.check_dqn_config(EXAMPLE, list(dvp.NO_EVALUATION)) is None
    assert "not 'dqn'" in dvp.check_dqn_config(BENCH.parent / "examples" / "cartpole_ppo.yaml", [])
    assert "not found" in dvp.check_dqn_config(tmp_path / "missing.yaml", [])
    assert dvp.main(["--config", str(tmp_path / "missing.yaml"), "--work-dir", str(tmp_path)]) == 2


@pytest.mark.parametrize(("k_time", "verdict"), [(4.0, "met (0.40)"), (7.0, "NOT met (0.70)")])
def test_goal_verdict_on_the_median_time_ratio(k_time: float, verdict: str) -> None:
    R = pvp.RunResult
    results = [R("kiloRL", "cartpole", 1, True, "threshold", time_s=k_time, time_incl_startup_s=k_time + 9, env_steps=20_000),
               R("SB3", "cartpole", 1, True, "threshold", time_s=10.0, time_incl_startup_s=11.0, env_steps=25_000)]
    summary = pvp.summarize(results)
    assert dvp.goal_line(summary).endswith(verdict + ".")
    table = pvp.markdown(dvp.ENV, results, summary, 600, "examples/cartpole_dqn.yaml", list(dvp.NO_EVALUATION), peer=dvp.PEER)
    assert "SB3: rl-zoo DQN entry" in table and "`-o evaluation.every_env_steps=null`" in table
    assert "time to a 20-episode rolling mean of 475" in table
    by_eval = pvp.markdown(dvp.ENV, results, summary, 600, "x.yaml", [], peer=dvp.PEER, rule="the first greedy evaluation at 475")
    assert "time to the first greedy evaluation at 475" in by_eval and "rolling" not in by_eval.splitlines()[0]


def test_goal_verdict_from_a_bound_when_sb3_never_reaches() -> None:
    R = pvp.RunResult
    results = [R("kiloRL", "cartpole", s, True, "threshold", time_s=t, env_steps=1) for s, t in ((1, 3.0), (2, 4.0), (3, 5.0))]
    results += [R("SB3", "cartpole", 1, True, "threshold", time_s=10.0, env_steps=1),
                R("SB3", "cartpole", 2, False, "step_limit"), R("SB3", "cartpole", 3, False, "budget")]
    line = dvp.goal_line(pvp.summarize(results))
    assert line.endswith("met (<= 0.4).") and "NOT" not in line
    only_sb3 = pvp.summarize([R("kiloRL", "cartpole", 1, False, "budget"), R("SB3", "cartpole", 1, False, "budget")])
    assert "no ratio" in dvp.goal_line(only_sb3)


def test_the_eval_rule_takes_the_first_evaluation_at_475_less_every_evaluations_time(tmp_path: Path) -> None:
    rows = [{"env_steps": 2560, "train_time": 10.0, "wall_time": 15.0, "eval_s": 2.0, "eval_return_mean": 300.0},
            {"env_steps": 3840, "train_time": 14.0, "wall_time": 19.0, "episodes": 20, "episode_return_mean": 480.0},
            {"env_steps": 5120, "train_time": 22.0, "wall_time": 27.0, "eval_s": 3.0, "eval_return_mean": 476.0},
            {"env_steps": 7680, "train_time": 30.0, "wall_time": 35.0, "eval_s": 1.0, "eval_return_mean": 500.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = dvp.kilorl_eval_result(1, tmp_path, 0, False)
    assert (r.reached, r.stop_reason, r.env_steps) == (True, "threshold", 5120)
    assert (r.time_s, r.time_incl_startup_s) == (22.0 - 5.0, 27.0 - 5.0)  # the rolling 480 at 3,840 does not count
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    missed = dvp.kilorl_eval_result(1, tmp_path, 0, False)
    assert (missed.reached, missed.stop_reason, missed.time_s) == (False, "step_limit", None)


def test_the_eval_rule_stops_kilorl_on_evaluations_not_on_training_episodes() -> None:
    cfg = load_config(str(EXAMPLE), ["train.stop_return=475", *dvp.eval_overrides(2560)])
    e = cfg.evaluation
    assert (e.every_env_steps, e.episodes, e.stop_return, e.stop_consecutive) == (2560, 10, 475.0, 1)
    assert cfg.train.stop_return is None and not e.keep_best
