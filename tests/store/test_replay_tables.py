"""Replay tables served by real store workers: chunks, eviction, priorities, the rate
limiter, bad chunks, and one table sharded over two workers of a mesh."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kilorl.store import InvalidRequest, KeyNotFound, StoreTimeout
from kilorl.store.client.replay import encode_chunk
from kilorl.store.client.replay_shards import ShardedTable
from kilorl.store.replay.spec import make_spec

ROW = {"obs": ((16,), np.float32), "action": ((), np.int64), "reward": ((), np.float32)}
CALL_TIMEOUT_S = 30.0
"""A blocked call's deadline: far above any wait the rate limiter should impose."""


@pytest.fixture(scope="module")
def shared_worker(tmp_path_factory):
    """One worker for the tests that neither stop it nor depend on its other tables (each
    makes tables of its own names): a worker start is seconds on a loaded machine."""
    from store_helpers import WorkerProcess

    w = WorkerProcess(tmp_path_factory.mktemp("replay"), "--shm-size", "16MiB", name="shared").start()
    yield w
    if w.alive():
        w.proc.kill()
        w.proc.wait(10)
    w.remove_arena()


@pytest.fixture
def shared_client(shared_worker):
    c = shared_worker.client()
    yield c
    c.close()


def rows(start: int, n: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """``n`` rows whose values encode their insert position (``obs[:, 0]``) plus noise."""
    rng = rng or np.random.default_rng(start)
    obs = rng.standard_normal((n, 16)).astype(np.float32)
    obs[:, 0] = np.arange(start, start + n)
    return {"obs": obs, "action": rng.integers(0, 2, n), "reward": rng.standard_normal(n).astype(np.float32)}


@pytest.mark.parametrize("compression", ["none", "zstd", "lz4"])
def test_sampled_rows_are_bit_exact_copies_of_inserted_ones(client, compression):
    if compression == "lz4":
        pytest.importorskip("lz4")
    frames = {"frame": ((84, 84), np.uint8), "reward": ((), np.float32)}
    t = client.replay_tables
    t.create(make_spec("frames", frames, 64, compression=compression, chunk_length=6))
    rng = np.random.default_rng(0)
    inserted = []
    for _ in range(4):  # Atari-like: mostly flat with a few edges, compresses well
        f = np.zeros((16, 84, 84), np.uint8)
        f[:, rng.integers(0, 84, 16), :] = rng.integers(0, 255, (16, 84), dtype=np.uint8)
        chunk = {"frame": f, "reward": rng.standard_normal(16).astype(np.float32)}
        inserted.append(chunk)
        t.insert("frames", chunk)
    s = t.sample("frames", 512)
    for i, rid in enumerate(s.ids.tolist()):
        src = inserted[rid // 16]
        assert s.columns["frame"][i].tobytes() == src["frame"][rid % 16].tobytes()
        assert s.columns["reward"][i].tobytes() == src["reward"][rid % 16].tobytes()
    info = t.info("frames")
    assert info["rows"] == 64 and info["raw_bytes"] == 64 * (84 * 84 + 4)
    if compression != "none":
        assert info["compression_ratio"] > 5, info


def test_fifo_eviction_drops_the_oldest_rows_and_empty_chunks(client):
    t = client.replay_tables
    t.create(make_spec("fifo", ROW, 10, compression="zstd", chunk_length=4))
    for start in (0, 4, 8):
        t.insert("fifo", rows(start, 4))
    info = t.info("fifo")
    assert (info["rows"], info["inserted_rows"], info["chunks"]) == (10, 12, 3)
    s = t.sample("fifo", 400)
    assert set(s.ids.tolist()) == set(range(2, 12))  # rows 0 and 1 are gone, all others drawn
    assert np.array_equal(s.columns["obs"][:, 0], s.ids.astype(np.float32))
    t.insert("fifo", rows(12, 4))  # evicts the rest of the first chunk
    assert t.info("fifo")["chunks"] == 3
    assert np.allclose(np.unique(s.probabilities), 0.1)


def test_prioritized_frequencies_pass_a_chi_square_test(client):
    from scipy.stats import chisquare

    t = client.replay_tables
    t.create(make_spec("per", ROW, 32, sampler="prioritized", alpha=0.7, seed=3))
    prios = np.linspace(0.1, 4.0, 32)
    t.insert("per", rows(0, 32), priorities=prios)
    draws = np.concatenate([t.sample("per", 1000).ids for _ in range(40)])
    expected = prios ** 0.7 / (prios ** 0.7).sum()
    counts = np.bincount(draws, minlength=32)
    assert chisquare(counts, expected * counts.sum()).pvalue > 1e-3
    # new priorities move the distribution; an evicted row's update is skipped
    s = t.sample("per", 8)
    assert np.allclose(s.probabilities, expected[s.ids])
    assert t.update_priorities("per", np.array([0, 5]), np.array([100.0, 0.0])) == 2
    t.insert("per", rows(32, 1))  # evicts row 0 (slot 0 now holds row 32)
    assert t.update_priorities("per", np.array([0, 32]), np.array([1.0, 1.0])) == 1
    assert 5 not in set(np.concatenate([t.sample("per", 500).ids for _ in range(4)]).tolist())


def _race(client_a, client_b, name: str, spi: float, slow_side: str, slow_calls: int) -> dict:
    """An inserter and a sampler on their own connections; the slow side makes ``slow_calls``
    paced calls, the fast side calls flat out until the slow side is done. Returns stats."""
    done = threading.Event()
    errors: list[BaseException] = []

    def inserter() -> None:
        i = 0
        try:
            while (i < slow_calls) if slow_side == "insert" else not done.is_set():
                try:
                    client_a.replay_tables.insert(name, rows(8 * i, 8), timeout=0.2)
                    i += 1
                except StoreTimeout:
                    continue
                if slow_side == "insert":
                    time.sleep(0.004)  # pacing: this side is the slow one
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            if slow_side == "insert":
                done.set()

    def sampler() -> None:
        i = 0
        try:
            while (i < slow_calls) if slow_side == "sample" else not done.is_set():
                try:
                    client_b.replay_tables.sample(name, 32, timeout=0.2)
                    i += 1
                except StoreTimeout:
                    continue
                if slow_side == "sample":
                    time.sleep(0.004)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            if slow_side == "sample":
                done.set()

    threads = [threading.Thread(target=f) for f in (inserter, sampler)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(CALL_TIMEOUT_S * 4)
    assert not any(th.is_alive() for th in threads), "a side is stuck: deadlock"
    assert not errors, errors
    return client_a.replay_tables.info(name)


@pytest.mark.parametrize("slow_side", ["insert", "sample"])
def test_rate_limiter_holds_samples_per_insert_and_reports_blocked_time(worker, client, slow_side):
    spi = 4.0
    client.replay_tables.create(make_spec("rl", ROW, 100_000, limiter={
        "samples_per_insert": spi, "min_size_to_sample": 16, "tolerance": 64}))
    other = worker.client()
    info = _race(client, other, "rl", spi, slow_side, slow_calls=120)
    achieved = info["sampled_rows"] / info["inserted_rows"]
    assert abs(achieved - spi) <= 0.1 * spi, info
    fast = "blocked_sample_s" if slow_side == "insert" else "blocked_insert_s"
    assert info[fast] > 0, info  # the fast side waited, and it is reported
    other.close()


def test_one_thread_inserting_and_sampling_is_never_refused_on_both_sides(client):
    """One thread that only calls the side the limiter admits (``timeout=0``) never finds
    both refused, whatever the sizes of its calls."""
    t = client.replay_tables
    t.create(make_spec("one", ROW, 1000, limiter={"samples_per_insert": 2.0, "min_size_to_sample": 20}))
    rng = np.random.default_rng(5)
    for step in range(300):
        try:
            t.sample("one", int(rng.integers(1, 64)), timeout=0)
        except StoreTimeout:
            t.insert("one", rows(step, int(rng.integers(1, 20))), timeout=0)  # must be admitted now
    info = t.info("one")
    assert info["sampled_rows"] > 0 and info["blocked_insert_s"] < 1 and info["blocked_sample_s"] < 1


def test_a_bad_chunk_is_refused_by_name_and_the_worker_serves_on(client):
    t = client.replay_tables
    t.create(make_spec("good", ROW, 50))
    t.insert("good", rows(0, 5))
    spec = make_spec("zt", ROW, 50, compression="zstd")
    t.create(spec)
    n, parts, bufs = encode_chunk(spec, rows(0, 5))
    with pytest.raises(InvalidRequest, match=r"'zt', chunk 'actor0/1'.*missing \['reward'\]"):
        t.insert_encoded("zt", [{"key": "actor0/1", "rows": n, "columns": parts[:2]}], bufs[:2])
    corrupt = [bytes(bufs[0][:-3]) + b"xyz", bytes(bufs[1]), bytes(bufs[2])]
    good_then_bad = [{"key": "actor0/2a", "rows": n, "columns": parts}, {"key": "actor0/2", "rows": n, "columns": parts}]
    with pytest.raises(InvalidRequest, match=r"'zt', chunk 'actor0/2', column 'obs': corrupt zstd"):
        t.insert_encoded("zt", good_then_bad, [*bufs, *corrupt])
    with pytest.raises(InvalidRequest, match=r"'zt', chunk 'actor0/3', column 'obs': .*needs 320"):
        t.insert_encoded("zt", [{"key": "actor0/3", "rows": n, "columns": [{**parts[0], "raw_nbytes": 64}, *parts[1:]]}],
                         bufs)
    with pytest.raises(InvalidRequest, match="column 'obs': got float64"):
        t.insert("zt", {**rows(0, 5), "obs": np.zeros((5, 16))})
    with pytest.raises(KeyNotFound, match="'nope'"):
        t.sample("nope", 4)
    assert t.info("zt")["rows"] == 0  # nothing of a refused insert was kept, its good chunk neither
    assert t.sample("good", 4).columns["obs"].shape == (4, 16)  # same connection, other table
    t.insert("zt", rows(0, 5))
    assert t.info("zt")["rows"] == 5


def test_a_table_sharded_over_two_workers_of_a_mesh(cluster_of):
    a, b = cluster_of("builtin").start(2)
    ca, cb = a.client(), b.client()
    spec = make_spec("sh", ROW, 2000, sampler="prioritized", alpha=1.0)
    table = ShardedTable([ca.replay_tables, cb.replay_tables], spec, seed=1)
    for i in range(6):  # shard 0 gets chunks 0, 2, 4; shard 1 chunks 1, 3, 5
        table.insert(rows(100 * i, 100), priorities=np.full(100, 1.0 + (i % 2)))
    s = table.sample(3000)
    assert set(s.shards.tolist()) == {0, 1}
    share1 = np.mean(s.shards == 1)  # shard 1 holds 2/3 of the priority mass
    assert abs(share1 - 2 / 3) < 0.05, share1
    assert np.allclose(s.probabilities, np.where(s.shards == 1, 2.0, 1.0) / 900.0)
    assert table.update_priorities(s.shards[:10], s.ids[:10], np.ones(10)) == 10
    info = table.info()
    assert info["rows"] == 600 and [sh["rows"] for sh in info["shards"]] == [300, 300]
    table.close()
    ca.close()
    cb.close()


def test_a_table_larger_than_the_workers_memory_is_refused_naming_both_numbers(shared_client):
    t = shared_client.replay_tables
    huge = make_spec("huge", ROW, 10**12)  # 76 bytes per row: 76 TB
    with pytest.raises(InvalidRequest, match=r"'huge': capacity 1000000000000 x 76 bytes per row = .* does not fit "
                                             r"this worker's memory \(.* available.*disk tier \(0\.00 GiB"):
        t.create(huge)
    assert t.create(make_spec("small", ROW, 100))  # refused by name, the worker serves on
    t.insert("small", rows(0, 10))
    assert t.info("small")["rows"] == 10


def test_a_rate_limited_table_over_two_workers_gives_one_thread_its_budget_and_never_refuses_it(workers):
    """One thread (a learner) inserts rollouts and samples whole batches of what the limiters
    owe it: every call is admitted at once (``timeout=0``) on both shards, and the sampled
    rows track ``samples_per_insert`` x rows inserted past ``min_size_to_sample``. Random
    shares of a batch would drift a shard's count out of its tolerance and be refused."""
    a, b = workers("--shm-size", "16MiB"), workers("--shm-size", "16MiB")
    ca, cb = a.client(), b.client()
    spi, batch, min_size = 4.0, 32, 64
    spec = make_spec("lim", ROW, 10_000, limiter={"samples_per_insert": spi, "min_size_to_sample": min_size,
                                                  "tolerance": spi + batch + 1})
    table = ShardedTable([ca.replay_tables, cb.replay_tables], spec, seed=2)
    rng = np.random.default_rng(3)
    inserted = sampled = 0
    for _ in range(150):
        n = int(rng.integers(8, 40))
        table.insert(rows(inserted, n, rng), timeout=0)
        inserted += n
        steps = table.sample_budget() // batch
        if steps:
            assert table.sample(steps * batch, timeout=0).ids.size == steps * batch
            sampled += steps * batch
    info = table.info()
    assert info["inserted_rows"] == inserted and info["sampled_rows"] == sampled
    owed = spi * (inserted - min_size)  # each shard's min_size_to_sample is half the table's
    assert owed - batch - 2 <= sampled <= owed + 2, (sampled, owed)
    assert info["blocked_insert_s"] == 0 and info["blocked_sample_s"] == 0
    table.close()
    ca.close()
    cb.close()


def test_an_insert_repeated_after_a_reconnect_stores_its_rows_once(shared_worker, shared_client):
    """An insert waits in the rate limiter; its connection breaks; the client reconnects and
    sends the same insert again, so the worker holds two of it. Once a sample admits inserts,
    one stores the rows and the other is recognised by its key: the rows are there once."""
    import socket

    client = shared_client
    t = client.replay_tables
    t.create(make_spec("once", ROW, 1000, limiter={"samples_per_insert": 1.0, "min_size_to_sample": 10,
                                                   "tolerance": 1.0}))
    t.insert("once", rows(0, 10))
    t.insert("once", rows(10, 5))  # the count is now 4 past its band: the next insert waits
    other = shared_worker.client()

    def until(field: str, value: int) -> dict:
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while (info := other.replay_tables.info("once"))[field] != value:
            assert time.monotonic() < deadline, info
            time.sleep(0.01)
        return info

    result: dict[str, int] = {}
    th = threading.Thread(target=lambda: result.update(first=t.insert("once", rows(15, 10), key="retry-me",
                                                                      timeout=CALL_TIMEOUT_S)))
    th.start()
    until("waiting_inserts", 1)
    client._fs.sock.shutdown(socket.SHUT_RDWR)  # the reply can never come: the client sends it again
    until("waiting_inserts", 2)
    other.replay_tables.sample("once", 8, timeout=CALL_TIMEOUT_S)  # admits inserts again
    th.join(CALL_TIMEOUT_S)
    assert not th.is_alive() and result["first"] == 15
    other.replay_tables.sample("once", 16, timeout=CALL_TIMEOUT_S)  # would admit a copy still waiting
    info = until("waiting_inserts", 0)
    assert (info["inserted_rows"], info["insert_calls"], info["repeated_inserts"]) == (25, 3, 1), info
    other.close()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_frame_stacks_are_stored_as_single_frames_and_rebuilt_bit_exact(shared_client, compression):
    """Rows are stacks of the last 4 frames (an episode's first stack repeats its first frame,
    as Gymnasium's FrameStackObservation pads) and next_obs is the stack a step on (at an
    episode's end, with a frame obs never holds); each env's steps are consecutive rows. The
    table keeps each distinct frame of a chunk once, for both columns, and every sampled stack
    is the inserted one, byte for byte, across episode, env and chunk boundaries. A sample
    decodes only its rows' frames: one row, at most 5 (obs and next_obs share 3)."""
    k, T, envs = 4, 40, 3
    rng = np.random.default_rng(11)
    stacks, nexts = [], []
    for _ in range(envs):
        frames = rng.integers(0, 255, (T, 84, 84), dtype=np.uint8)
        starts = np.r_[0, np.flatnonzero(rng.random(T - 1) < 0.1) + 1]
        episode_start = starts[np.searchsorted(starts, np.arange(T), side="right") - 1]
        for t in range(T):
            back = np.maximum(np.arange(t - k + 1, t + 1), episode_start[t])
            stacks.append(frames[back])
            if t + 1 < T and episode_start[t + 1] == episode_start[t]:
                nexts.append(frames[np.maximum(np.arange(t - k + 2, t + 2), episode_start[t])])
            else:  # the episode's last step: next_obs ends with its final frame
                nexts.append(np.concatenate([frames[back[1:]], rng.integers(0, 255, (1, 84, 84), dtype=np.uint8)]))
    stacks, nexts = np.stack(stacks), np.stack(nexts)
    name = f"stk-{compression}"
    spec = make_spec(name, {"obs": ((k, 84, 84), np.uint8), "action": ((), np.int64),
                            "next_obs": ((k, 84, 84), np.uint8)}, 1000,
                     compression=compression, chunk_length=16, stacked=("obs", "next_obs"))
    t = shared_client.replay_tables
    t.create(spec)
    t.insert(name, {"obs": stacks, "action": np.arange(len(stacks)), "next_obs": nexts})
    info = t.info(name)
    assert info["rows"] == envs * T and info["compression_ratio"] > 5, info  # ~1 frame per row, not 8
    s = t.sample(name, 2000)
    assert s.columns["obs"].shape == s.columns["next_obs"].shape == (2000, k, 84, 84)
    assert np.array_equal(s.columns["action"], s.ids)
    for i, rid in enumerate(s.ids.tolist()):
        assert s.columns["obs"][i].tobytes() == stacks[rid].tobytes()
        assert s.columns["next_obs"][i].tobytes() == nexts[rid].tobytes()
    for _ in range(20):
        before = t.info(name)["decoded_frames"]
        one = t.sample(name, 1)
        assert t.info(name)["decoded_frames"] - before <= k + 1
        rid = int(one.ids[0])
        assert one.columns["obs"][0].tobytes() == stacks[rid].tobytes()
        assert one.columns["next_obs"][0].tobytes() == nexts[rid].tobytes()
