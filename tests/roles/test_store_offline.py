"""Recorded rows on a store worker (``replay_buffer.offline`` with ``backend: store``): a table
of their own holding exactly the dataset, loaded once per run, never evicted by the online
table wrapping, and every mixed batch holds exactly its share of them."""

from __future__ import annotations

import types

import numpy as np

from kilorl.algos.common.offline_mix import MixedSource, sample_batches
from kilorl.algos.common.transitions import TransitionTable
from kilorl.config_replay import ReplayBufferConfig
from kilorl.roles.store_offline import StoreOfflineTable, shard_slices, store_offline_factory
from kilorl.roles.store_replay import store_replay_factory
from tests.algos.test_sac import _rollout, one_torch_thread  # noqa: F401 (an autouse fixture)


def _rows(n: int = 50) -> dict[str, np.ndarray]:
    """Rows whose ``reward`` is -1 - i/n (online rows of ``_rollout`` are N(0, 1) draws, never these)."""
    return {"obs": np.full((n, 3), 9.0, np.float32), "action": np.zeros((n, 2), np.float32),
            "reward": (-1.0 - np.arange(n) / n).astype(np.float32), "next_obs": np.zeros((n, 3), np.float32),
            "discount": np.ones(n, np.float32)}


def _connect(store_worker):
    return lambda: store_worker.client()


def _online(store_worker, capacity: int) -> TransitionTable:
    make = store_replay_factory(_connect(store_worker), ReplayBufferConfig(), run_id="t/learner0")
    return TransitionTable(capacity, (3,), np.float32, 0.99, 1, seed=1, storage=make,
                           action_shape=(2,), action_dtype=np.float32)


def test_every_one_of_1000_batches_holds_exactly_its_share_of_the_workers_recorded_rows(store_worker):
    make = store_offline_factory(_connect(store_worker), ReplayBufferConfig(), scope="t/offline0")
    offline = make("sac-0", _rows(), 3)
    online = _online(store_worker, capacity=40)
    source = MixedSource(online, offline, ratio=0.3)
    for i in range(10):  # 10 x 32 rows into an online table of 40: it wraps eight times
        source.add(_rollout(i))
    assert len(online) == 40 and len(offline) == 50 and len(source) == 90
    recorded_rewards = set(_rows()["reward"].tolist())
    seen: set[float] = set()
    for b in range(10):  # 10 draws of 100 batches: each batch its own share
        batch = sample_batches(source, 37, 100)
        recorded = np.isin(batch["reward"], list(recorded_rewards))
        np.testing.assert_array_equal(recorded, batch["offline"])
        assert round(0.3 * 37) == 11 and (recorded.reshape(100, 37).sum(1) == 11).all(), b
        np.testing.assert_array_equal(batch["obs"][recorded], 9.0)
        seen |= set(batch["reward"][recorded].tolist())
    assert seen == recorded_rewards  # every recorded row still there after the online table wrapped
    info = offline.table.info()
    assert info["rows"] == 50 and info["inserted_rows"] == 50  # the online inserts never reached it
    offline.close()
    online.table.close()


def test_the_rows_are_loaded_once_per_run_and_a_half_loaded_table_is_loaded_again(store_worker):
    make = store_offline_factory(_connect(store_worker), ReplayBufferConfig(), scope="t/offline0")
    first = make("sac-0", _rows(), 3)
    again = make("sac-0", _rows(), 3)  # a resumed run, or a rebuilt learner of the same run
    assert first.loaded_rows == 50 and again.loaded_rows == 0 and again.name == first.name
    assert again.table.info()["inserted_rows"] == 50
    other = make("sac-0", _rows(60), 3)  # another dataset: another table, not the old rows
    assert other.name != first.name and other.loaded_rows == 60 and other.table.info()["rows"] == 60
    tables = store_worker.client().replay_tables
    shard_spec = tables.spec(first.name)
    tables.drop(first.name)  # as if a load had been cut short after 20 rows ...
    tables.create(shard_spec)
    tables.insert(first.name, {k: v[:20] for k, v in _rows().items()})
    reloaded = make("sac-0", _rows(), 3)  # ... the next start drops it and loads all rows once
    assert reloaded.loaded_rows == 50 and reloaded.table.info()["inserted_rows"] == 50
    assert sorted(set(reloaded.sample(2000)["reward"].tolist())) == sorted(_rows()["reward"].tolist())
    for t in (first, again, other, reloaded):
        t.close()


def test_each_shard_gets_a_slice_no_longer_than_the_capacity_it_keeps():
    assert shard_slices(10, 3) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert shard_slices(5, 1) == [slice(0, 5)]


def test_sac_on_the_store_keeps_its_recorded_rows_on_the_workers(store_worker, tmp_path):
    """The learner role hands SAC the workers' table when its replay table is there; SAC trains
    on mixed batches and its checkpoint holds no recorded row."""
    import gymnasium as gym

    from kilorl.roles.grad_comm import AllReduceComm
    from kilorl.roles.learner import build_algorithm
    from kilorl.trainer.record import record
    from tests.conftest import tiny_config

    record(tmp_path / "d", episodes=1, seed=1, env_id="Pendulum-v1", policy="random")
    cfg = tiny_config(env={"id": "Pendulum-v1"}, algo={"name": "sac", "batch_size": 8, "learning_starts": 0},
                      model={"hidden_sizes": [16]}, sync={"mode": "async"},
                      replay_buffer={"offline": {"path": str(tmp_path / "d"), "ratio": 0.5}})
    env = gym.make("Pendulum-v1")
    store = types.SimpleNamespace(connect=_connect(store_worker))
    learner = build_algorithm(cfg, AllReduceComm(1), (env.observation_space, env.action_space), store=store,
                              replay_prefix="run-x")
    source = learner.make_replay_table()
    assert isinstance(source.offline, StoreOfflineTable) and len(source.offline) == 200
    assert source.offline.name.startswith("run-x/offline0/sac-0-")
    rollout = _pendulum_rollout()
    source.add(rollout)
    stats = learner.update(source, 16)
    assert stats["gradient_steps"] == 16 and {"offline_q_mean", "online_q_mean"} <= set(stats)
    state = learner.state()
    assert "offline_rng" not in state["extra_meta"] and not any("offline" in k for k in state["tensors"])


def _pendulum_rollout():
    from kilorl.algos import keys
    from kilorl.core import Rollout

    rng = np.random.default_rng(0)
    T, N = 16, 1
    steps = {keys.OBS: rng.uniform(-1, 1, (T, N, 3)).astype(np.float32),
             keys.ACTIONS: rng.uniform(-2, 2, (T, N, 1)).astype(np.float32),
             keys.REWARDS: rng.normal(size=(T, N)).astype(np.float32),
             keys.TERMINATED: np.zeros((T, N), bool), keys.TRUNCATED: np.zeros((T, N), bool)}
    final = {keys.FINAL_T: np.zeros(0, np.int64), keys.FINAL_ENV: np.zeros(0, np.int64),
             keys.OBS: np.zeros((0, 3), np.float32)}
    return Rollout(steps, last={keys.OBS: rng.uniform(-1, 1, (N, 3)).astype(np.float32)}, final=final)


def test_over_two_workers_each_holds_its_slice_and_a_batch_draws_from_all_rows(tmp_path):
    from kilorl.roles.store_offline import load_offline_table, rows_digest
    from kilorl.store.replay.spec import make_spec
    from tests.store.store_helpers import WorkerProcess

    workers = []
    try:
        for name in ("a", "b"):
            workers.append(WorkerProcess(tmp_path, "--shm-size", "64MiB", name=name).start())
        rows = _rows(11)
        schema = {k: (v.shape[1:], v.dtype) for k, v in rows.items()}
        spec = make_spec(f"t/offline0/sac-0-{rows_digest(rows)}", schema, 11, seed=4)
        table = load_offline_table([w.client() for w in workers], spec, rows)
        assert [s["rows"] for s in table.table.info()["shards"]] == [6, 5]  # ceil(11 / 2), the rest
        assert sorted(set(table.sample(3000)["reward"].tolist())) == sorted(rows["reward"].tolist())
        again = load_offline_table([w.client() for w in workers], spec, rows)
        assert again.loaded_rows == 0 and again.table.info()["inserted_rows"] == 11
        table.close()
        again.close()
    finally:
        for w in workers:
            if w.alive():
                w.proc.kill()
                w.proc.wait(10)
            w.remove_arena()
