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
