"""A replay algorithm's table on a store worker (the ``replay_buffer`` section): DQN's adder
fills it with exactly the transitions it would keep in its own process."""

from __future__ import annotations

import numpy as np

from kilorl.algos.dqn.transitions import COLUMNS, TransitionTable, nstep_transitions
from kilorl.config_replay import ReplayBufferConfig
from kilorl.core import Rollout
from kilorl.roles.store_replay import store_replay_factory


def rollout(seed: int, T: int = 16, N: int = 3, obs_dim: int = 16) -> Rollout:
    rng = np.random.default_rng(seed)
    steps = {"obs": rng.normal(size=(T, N, obs_dim)).astype(np.float32), "actions": rng.integers(0, 2, (T, N)),
             "rewards": rng.normal(size=(T, N)).astype(np.float32), "terminated": rng.random((T, N)) < 0.1,
             "truncated": rng.random((T, N)) < 0.05}
    return Rollout(steps=steps, last={"obs": rng.normal(size=(N, obs_dim)).astype(np.float32)})


def test_dqn_transitions_on_a_store_table_are_the_adders_rows_bit_for_bit(store_worker):
    section = ReplayBufferConfig(compression="zstd", chunk_length=4)  # obs rows of 64 bytes: kept encoded
    make = store_replay_factory(lambda: store_worker.client(), section, run_id="t")
    table = TransitionTable(1000, (16,), np.float32, gamma=0.9, n_step=3, seed=0, storage=make)
    r = rollout(1)
    table.add(r)
    expected = nstep_transitions(r, 0.9, 3)
    stats = table.stats()  # random floats: zstd keeps them about as large (the ratio is not the point here)
    assert len(table) == 48 and stats["replay_raw_bytes"] == 48 * (64 + 8 + 4 + 64 + 4) and stats["replay_shards"] == 1

    def keyed(cols):  # each row as bytes of every column, in COLUMNS order
        return [b"".join(np.ascontiguousarray(cols[c][i]).astype(table_dtype(c)).tobytes() for c in COLUMNS)
                for i in range(len(cols["reward"]))]

    def table_dtype(c):
        return {"action": np.int64}.get(c, np.float32)

    want = set(keyed(expected))
    got = keyed(table.sample(2000))
    assert set(got) == want  # every row drawn, and nothing else
    table.table.close()


def _dqn_learner(store_worker, replay_buffer: dict, total_env_steps: int = 4800, learning_starts: int = 0):
    import types

    import gymnasium as gym

    from kilorl.roles.grad_comm import AllReduceComm
    from kilorl.roles.learner import build_algorithm
    from tests.conftest import tiny_config

    cfg = tiny_config(env={"id": "CartPole-v1"}, sync={"mode": "async"},
                      algo={"name": "dqn", "batch_size": 32, "learning_starts": learning_starts, "buffer_size": 4000},
                      model={"hidden_sizes": [16]}, train={"total_env_steps": total_env_steps},
                      replay_buffer=replay_buffer)
    spaces = (gym.spaces.Box(-np.inf, np.inf, (16,), np.float32), gym.spaces.Discrete(2))
    store = types.SimpleNamespace(connect=lambda: store_worker.client())
    learner = build_algorithm(cfg, AllReduceComm(1), spaces, store=store)
    return learner, learner.make_replay_table()


def test_dqn_takes_the_gradient_steps_the_rate_limiter_allows_and_sends_back_priorities(store_worker):
    """``samples_per_insert: 1`` with batches of 32: 1/32 gradient step per row inserted
    past ``min_size_to_sample``, whatever ``train_freq`` says; the table counts exactly the
    rows sampled, nobody waits, and the TD errors become the rows' priorities."""
    learner, table = _dqn_learner(store_worker, {"samples_per_insert": 1, "min_size_to_sample": 100,
                                                 "prioritized": {"alpha": 1.0}, "compression": "zstd"})
    steps, env_steps = [], 0
    for i in range(10):
        r = rollout(i)  # 48 rows
        table.add(r)
        env_steps += 48
        steps.append(learner.update(table, env_steps)["gradient_steps"])
    owed = 1 * (480 - 100)
    assert sum(steps) == owed // 32 and steps[:2] == [0, 0]  # 96 rows < 100: nothing sampled yet
    info = table.table.table.info()
    assert info["sampled_rows"] == 32 * sum(steps) and info["inserted_rows"] == 480
    assert info["blocked_sample_s"] == 0 and info["blocked_insert_s"] == 0
    prio_total = info["shards"][0]["priority_total"]
    assert prio_total != 480.0  # new rows enter at priority 1 (alpha 1): sampled ones now carry |TD error|
    rows = table.sample(256)
    w = rows["weight"]
    assert w.shape == (256,) and w.dtype == np.float32 and w.max() == 1.0 and np.all(w > 0)
    table.table.close()


def test_a_rate_limited_table_opens_no_earlier_than_the_algorithms_learning_starts(store_worker):
    """``learning_starts: 200`` with ``min_size_to_sample: 10``: the limiter starts counting at 201
    rows, not 10. Counting from 10, it would block inserts 34 rows later while DQN waits for 200
    env steps before its first sample: neither side would move again."""
    learner, table = _dqn_learner(store_worker, {"samples_per_insert": 1, "min_size_to_sample": 10},
                                  learning_starts=200)
    assert table.min_size_to_sample == 201
    steps, env_steps = [], 0
    for i in range(8):  # 384 rows, inserted from this one thread: a blocked insert would hang here
        table.add(rollout(i))
        env_steps += 48
        steps.append(learner.update(table, env_steps)["gradient_steps"])
    assert steps[:4] == [0, 0, 0, 0] and sum(steps) == (384 - 201) // 32
    info = table.table.table.info()
    assert info["blocked_insert_s"] == 0 and info["sampled_rows"] == 32 * sum(steps)
    table.table.close()


def test_dqn_frame_stacks_on_a_store_table_are_single_frames_and_sample_bit_exact(store_worker):
    """``frame_stack: 4``: observations are stacks of an env's last 4 frames; the table keeps
    about one frame per row for ``obs`` and ``next_obs`` each, and every sampled row is the
    adder's n-step transition byte for byte (terminations and the rollout's end included)."""
    T, N, k = 16, 2, 4
    rng = np.random.default_rng(4)
    frames = rng.integers(0, 255, (T + k, N, 8, 8), dtype=np.uint8)  # k - 1 frames before the rollout, s_T after
    stack = np.stack([frames[t:t + k] for t in range(T + 1)])  # [T + 1, k, N, 8, 8]
    stack = stack.transpose(0, 2, 1, 3, 4)  # [T + 1, N, k, 8, 8]
    steps = {"obs": stack[:T], "actions": rng.integers(0, 2, (T, N)), "rewards": rng.normal(size=(T, N)).astype(np.float32),
             "terminated": rng.random((T, N)) < 0.1, "truncated": np.zeros((T, N), bool)}
    r = Rollout(steps=steps, last={"obs": stack[T]})
    section = ReplayBufferConfig(frame_stack=k, compression="zstd", chunk_length=16)
    make = store_replay_factory(lambda: store_worker.client(), section, run_id="fs")
    table = TransitionTable(1000, (k, 8, 8), np.uint8, gamma=0.9, n_step=3, seed=0, storage=make)
    table.add(r)
    expected = nstep_transitions(r, 0.9, 3)
    stats = table.stats()
    assert len(table) == T * N and stats["replay_compression_ratio"] > 2.5, stats  # not 4 frames a row
    got = table.sample(500)
    keyed = {(expected["obs"][i].tobytes(), expected["next_obs"][i].tobytes()): i for i in range(T * N)}
    assert len(keyed) == T * N  # every row told apart by its stacks
    for j in range(500):
        i = keyed[(got["obs"][j].tobytes(), got["next_obs"][j].tobytes())]
        assert got["reward"][j] == expected["reward"][i] and got["discount"][j] == expected["discount"][i]
        assert got["action"][j] == expected["action"][i]
    table.table.close()


def test_frame_stack_without_stacked_observations_is_an_error_naming_the_field():
    import pytest

    from kilorl.roles.store_replay import stacked_columns

    schema = {"obs": ((16,), np.float32), "action": ((), np.int64)}
    with pytest.raises(ValueError, match=r"replay_buffer\.frame_stack: 4, but no column .* \[4, \.\.\.\] stacks"):
        stacked_columns(ReplayBufferConfig(frame_stack=4), schema)
    assert stacked_columns(ReplayBufferConfig(frame_stack=4), {**schema, "obs": ((4, 84, 84), np.uint8)}) == ("obs",)


def test_env_runners_insert_themselves_only_into_a_table_with_a_shard_on_every_worker():
    from kilorl.roles.store_replay import actors_insert
    from tests.conftest import tiny_config

    def cfg(**replay_buffer):
        return tiny_config(algo={"name": "dqn"}, replay_buffer=replay_buffer)

    assert actors_insert(cfg(sharding=True, compression="zstd"))
    assert not actors_insert(cfg(sharding=False))  # one shard, on the learner's node: the learner inserts
    assert not actors_insert(cfg(shards=1))
    assert not actors_insert(cfg(backend="learner"))
    assert not actors_insert(tiny_config(algo={"name": "dqn"}))


def test_an_env_runners_rows_in_its_nodes_shard_are_the_adders_and_the_learners_budget_counts_them(store_worker):
    """``ActorInserts`` (the env runner's side) puts the adder's rows of its rollout into the
    learner's table on its node's worker; the learner, which inserted nothing, reads the
    shard's counts for its rate limiter's budget and samples exactly those rows."""
    from kilorl.roles.store_replay import ActorInserts, learner_scope
    from tests.conftest import tiny_config

    cfg = tiny_config(algo={"name": "dqn", "gamma": 0.9, "n_step": 3, "batch_size": 8},
                      parallelism={"actor": 2, "learner": 1},
                      replay_buffer={"compression": "zstd", "chunk_length": 4, "samples_per_insert": 2.0})
    make = store_replay_factory(lambda: store_worker.client(), cfg.replay_buffer, learner_scope("run-t", 0),
                                batch_size=8, external_inserts=True)
    table = TransitionTable(1000, (16,), np.float32, gamma=0.9, n_step=3, seed=0, storage=make, name="dqn-0")
    client = store_worker.client()
    inserts = ActorInserts(cfg, client, "run-t", index=1)  # env runner 1 of 2: learner 1 % 1 = 0's table
    r = rollout(5)
    handed = inserts.insert(r)
    assert handed.rows == 48 and handed.table == "run-t/learner0/dqn-0" and handed.worker == client.address
    assert table.sample_budget() == 2 * (48 - 1)  # samples_per_insert x rows past min_size_to_sample (1)
    expected = nstep_transitions(r, 0.9, 3)
    got = table.sample(2000)
    want = {tuple(expected["obs"][i].tolist()) + (expected["reward"][i],) for i in range(48)}
    assert {tuple(got["obs"][i].tolist()) + (got["reward"][i],) for i in range(2000)} == want
    assert table.stats()["replay_learner_inserted_rows"] == 0
    client.close()
    table.table.close()
