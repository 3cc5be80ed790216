"""The SAC peer benchmark's bookkeeping: HalfCheetah's example and SB3 on the same rl-zoo values,
the overrides of a run with no threshold, and the within-10 % verdict. The runs are the benchmark."""

from __future__ import annotations

import pytest

from kilorl.config import load_config
from tests.benchmarks.bench_modules import BENCH, load_bench

svp = load_bench("sac_vs_peers")
pvp = load_bench("ppo_vs_peers")
zoo = load_bench("zoo_hyperparams")


def test_the_halfcheetah_example_and_sb3_run_the_same_rl_zoo_values() -> None:
    entry = zoo.ZOO_SAC["HalfCheetah-v5"]
    cfg = load_config(str(BENCH.parent / svp.ENVS["halfcheetah"].default_config))
    a = cfg.algo
    assert entry.zoo_key == "HalfCheetah-v3" and entry.algo_kwargs == {"learning_starts": 10_000}
    assert a.learning_starts == 10_000 and a.batch_size == 256 and a.buffer_size == 1_000_000
    assert a.policy_lr == a.q_lr == a.alpha_lr == 3e-4  # SB3's one learning rate
    assert (a.tau, a.gamma, a.utd_ratio) == (0.005, 0.99, 1.0)
    assert list(cfg.model.hidden_sizes) == [256, 256] and cfg.model.activation == "relu"
    assert cfg.env.id == svp.ENVS["halfcheetah"].gym_id


def test_a_run_without_a_threshold_trains_its_env_steps_and_never_stops_on_a_return(monkeypatch) -> None:
    monkeypatch.setattr(svp, "ENV", svp.ENVS["halfcheetah"])
    out = svp.eval_overrides(25_000, 100_000)
    assert "evaluation.stop_return=null" in out and "train.total_env_steps=100000" in out
    monkeypatch.setattr(svp, "ENV", svp.ENVS["pendulum"])
    out = svp.eval_overrides(1024)
    assert "evaluation.stop_return=-200.0" in out and not any(o.startswith("train.total_env_steps") for o in out)


def _run(fw: str, seed: int, final: float | None) -> object:
    return pvp.RunResult(fw, "halfcheetah", seed, reached=False, stop_reason="step_limit", final_return_mean=final)


@pytest.mark.parametrize(("kilorl", "sb3", "within"), [
    ([4500.0, 5000.0, 5200.0], [5400.0, 5500.0, 5600.0], True),   # median 5000 >= 5500 - 550
    ([4000.0, 4900.0, 5200.0], [5400.0, 5500.0, 5600.0], False),  # median 4900 < 4950
    ([-120.0], [-100.0], False),                                   # negative returns: 10 % of the magnitude
    ([-105.0], [-100.0], True),
])
def test_the_verdict_compares_medians_within_ten_percent_of_sb3s(kilorl, sb3, within) -> None:
    results = [_run("kiloRL", i, v) for i, v in enumerate(kilorl)] + [_run("SB3", i, v) for i, v in enumerate(sb3)]
    summary = svp.at_steps_summary(results + [_run("SB3", 9, None)])  # a run with no evaluation is left out
    assert summary["within_10_percent"] is within
    assert summary["finals"]["SB3"] == sb3
