"""Several policies in one run (``multi_agent.policies``): each agent column acts with its
agent's policy, each policy gets its own rollout, published name, update and checkpoint part,
and a policy outside ``policies_to_train`` stays bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.algos import keys
from kilorl.roles.parameter_store import InMemoryParameterStore
from kilorl.roles.policy_columns import MultiPolicyEnvRunner
from kilorl.roles.policy_learners import PolicyLearners
from kilorl.trainer.checkpoint import load_checkpoint, load_policy_checkpoint, write_checkpoint
from tests.conftest import tiny_config

SPREAD = {"id": "mpe2.simple_spread_v3:parallel_env", "kwargs": {"N": 3, "local_ratio": 0.5, "max_cycles": 25}}
PER_GROUP = {"policies": {"first": {"algo": {"lr": 3e-3}}, "rest": {"model": {"hidden_sizes": [16]}}},
             "policy_mapping": {"agent_0": "first", "*": "rest"}}


def two_policies(**multi_agent):
    return tiny_config(env=SPREAD, multi_agent=PER_GROUP | multi_agent,
                       algo={"rollout_length": 8, "num_minibatches": 1, "update_epochs": 2},
                       parallelism={"actor": 1, "envs_per_actor": 2})


def started(cfg, state=None):
    store = InMemoryParameterStore()
    learners = PolicyLearners(cfg, store, state=state)
    learners.publish(0)
    return store, learners


def model_of(learners, policy):
    return {k: np.array(v) for k, v in learners.roles[policy].algorithm.weights().items() if k.startswith(keys.MODEL)}


def test_each_policy_is_published_under_its_own_name_with_its_own_network():
    store, learners = started(two_policies())
    assert store.latest_version("policy/first") == 0 and store.latest_version("policy/rest") == 0
    assert store.latest_version(keys.POLICY) is None
    _, rest = store.fetch("policy/rest", 0)
    assert any(t.shape[0] == 16 for t in rest.values())  # rest's own model section (hidden 16)


def test_columns_act_with_their_agents_policy_and_each_rollout_is_alive_on_its_agents_only():
    cfg = two_policies()
    store, _ = started(cfg)
    runner = MultiPolicyEnvRunner(cfg, store, 0, seed=0)
    rollouts, info = runner.collect(0)
    assert set(rollouts) == {"first", "rest"} and info["env_steps"] == 8 * 2
    first, rest = rollouts["first"].steps[keys.ALIVE], rollouts["rest"].steps[keys.ALIVE]
    # 2 copies x 3 agent slots; simple_spread's agents keep their slots: agent_0 holds column 0 of each copy
    np.testing.assert_array_equal(first, np.tile([True, False, False], (8, 2)))
    np.testing.assert_array_equal(first | rest, np.ones((8, 6), bool))
    assert not (first & rest).any()
    # the action each column took is the one its own policy's model gives the logged log-prob to
    for name, alive in (("first", first), ("rest", rest)):
        steps = rollouts[name].steps
        model = runner.parts[name].model
        with torch.no_grad():
            logp, _, _ = model.evaluate_actions(torch.from_numpy(steps[keys.OBS][alive]),
                                                torch.from_numpy(steps[keys.ACTIONS][alive]))
        np.testing.assert_allclose(logp.numpy(), steps[keys.LOGP][alive], rtol=1e-5, atol=1e-6)


def test_a_policy_outside_policies_to_train_stays_bit_identical_while_the_other_learns():
    cfg = two_policies(policies_to_train=["rest"])
    store, learners = started(cfg)
    runner = MultiPolicyEnvRunner(cfg, store, 0, seed=0)
    before = {p: model_of(learners, p) for p in ("first", "rest")}
    for version in (1, 2):
        rollouts, info = runner.collect(version - 1)
        stats = learners.update(version, version * info["env_steps"], rollouts)
        assert "policy_loss/rest" in stats and "policy_loss/first" not in stats
    assert store.latest_version("policy/first") == 2  # published every version, so actors never wait on it
    after = {p: model_of(learners, p) for p in ("first", "rest")}
    assert all(np.array_equal(before["first"][k], after["first"][k]) for k in before["first"])
    assert not all(np.array_equal(before["rest"][k], after["rest"][k]) for k in before["rest"])


def test_a_checkpoint_keeps_a_part_per_policy_and_a_resumed_run_continues_exactly(tmp_path):
    cfg = two_policies()
    store, learners = started(cfg)
    runner = MultiPolicyEnvRunner(cfg, store, 0, seed=0)
    first, info = runner.collect(0)
    learners.update(1, info["env_steps"], first)
    second, info = runner.collect(1)  # before the checkpoint: the runner draws from this process's RNG too
    path = write_checkpoint(tmp_path, learners.checkpoint_files(), {"env_steps": 16})
    assert sorted(p.name for p in (path / "policies").iterdir()) == ["first", "rest"]
    learners.update(2, 32, second)

    state, _ = load_checkpoint(path)
    _, resumed = started(cfg, state=state)
    resumed.update(2, 32, second)
    for policy in ("first", "rest"):
        want, got = model_of(learners, policy), model_of(resumed, policy)
        assert all(np.array_equal(want[k], got[k]) for k in want), policy
    part, _ = load_policy_checkpoint(path, "rest")
    assert part["updates"] == 1
    with pytest.raises(KeyError, match=r"no part for policy 'ghost'; it holds \['first', 'rest'\]"):
        load_policy_checkpoint(path, "ghost")


def test_a_checkpoint_without_a_policys_part_is_refused_naming_it(tmp_path):
    cfg = two_policies()
    _, learners = started(cfg)
    state = learners.state()
    del state["policies"]["rest"]
    with pytest.raises(ValueError, match=r"the checkpoint has no part for \['rest'\]"):
        PolicyLearners(cfg, InMemoryParameterStore(), state=state)


SCRIPTED = {"id": "tests.envs.scripted_agents:parallel_env", "max_num_agents": 2}


def test_kilorl_eval_plays_each_agent_with_its_policys_part_and_reports_each_policys_return(tmp_path):
    from kilorl.trainer.evaluate import evaluate

    # scripted rewards per episode: a_0 2 (ends after step 2), a_1 50, late 200 (appears after step 3)
    cfg = tiny_config(env=SCRIPTED, multi_agent={"policies": {"early": {}, "late": {}},
                                                 "policy_mapping": {"a_*": "early", "late": "late"}},
                      algo={"rollout_length": 6, "num_minibatches": 1, "update_epochs": 1},
                      parallelism={"actor": 1, "envs_per_actor": 1})
    _, learners = started(cfg)
    write_checkpoint(tmp_path, learners.checkpoint_files(), {"env_steps": 0, "config": cfg.model_dump(mode="json")})
    result = evaluate(tmp_path, episodes=3)
    assert result.returns == [252.0] * 3
    assert result.policy_return_means == {"early": 52.0, "late": 200.0}
