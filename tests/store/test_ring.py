"""Consistent-hash ring: balance, minimal movement, determinism and diff correctness."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kilorl.store.mesh.ring import (
    RING_SIZE,
    HashRing,
    diff,
    find_move,
    key_position,
)

KEYS = [f"obj/{i:06d}" for i in range(40_000)]
POSITIONS = [key_position(k) for k in KEYS]


def _counts(ring: HashRing) -> dict[str, int]:
    counts = {m: 0 for m in ring.members}
    for p in POSITIONS:
        counts[ring.owner_of_position(p)] += 1
    return counts


@pytest.mark.parametrize("n", [3, 8, 16])
def test_keys_spread_evenly_across_members(n):
    ring = HashRing([f"w{i}" for i in range(n)])
    mean = len(KEYS) / n
    counts = _counts(ring)
    assert set(counts) == set(ring.members)
    # 256 points per member: the spread stays within +-20 % of the mean.
    assert max(counts.values()) < 1.2 * mean, counts
    assert min(counts.values()) > 0.8 * mean, counts
    shares = ring.ownership()
    assert abs(sum(shares.values()) - 1.0) < 1e-12
    assert max(shares.values()) < 1.2 / n and min(shares.values()) > 0.8 / n


def test_weights_scale_the_share():
    ring = HashRing({"small": 1.0, "big": 2.0, "half": 0.5})
    counts = _counts(ring)
    assert 1.7 < counts["big"] / counts["small"] < 2.3, counts
    assert 0.35 < counts["half"] / counts["small"] < 0.65, counts
    assert ring.vnode_count("big") == 2 * ring.vnode_count("small")


def test_join_moves_about_one_over_n_and_only_to_the_joiner():
    old = HashRing([f"w{i}" for i in range(4)])
    new = old.with_member("w4")
    moved = 0
    for p in POSITIONS:
        before, after = old.owner_of_position(p), new.owner_of_position(p)
        if before != after:
            moved += 1
            assert after == "w4"
    assert 0.14 < moved / len(KEYS) < 0.26, moved  # ideal 1/5


def test_leave_moves_only_the_leavers_keys_and_spreads_them():
    old = HashRing([f"w{i}" for i in range(5)])
    new = old.without_member("w2")
    receivers: dict[str, int] = {}
    moved = 0
    for p in POSITIONS:
        before, after = old.owner_of_position(p), new.owner_of_position(p)
        if before != after:
            moved += 1
            assert before == "w2"
            receivers[after] = receivers.get(after, 0) + 1
        else:
            assert before != "w2"
    assert 0.14 < moved / len(KEYS) < 0.26, moved
    assert set(receivers) == {"w0", "w1", "w3", "w4"}  # no single hot receiver
    assert max(receivers.values()) < 0.45 * moved


def test_same_ring_regardless_of_insertion_order_and_serialization():
    a = HashRing({"a": 1.0, "b": 2.0, "c": 1.0})
    b = HashRing({"c": 1.0, "b": 2.0, "a": 1.0})
    assert a == b and a.boundaries() == b.boundaries()
    c = HashRing.from_dict(json.loads(json.dumps(a.to_dict())))
    assert c == a
    assert [c.owner(k) for k in KEYS[:2000]] == [a.owner(k) for k in KEYS[:2000]]


def test_owners_identical_in_another_interpreter_with_other_hash_seed():
    members = ["node-a", "node-b", "node-c", "node-d"]
    ring = HashRing(members)
    keys = KEYS[:500] + ["", "ünïcødé", "a/b/c"]
    script = (
        "import json,sys\n"
        "from kilorl.store.mesh.ring import HashRing\n"
        "keys, members = json.load(sys.stdin)\n"
        "r = HashRing(members)\n"
        "print(json.dumps([r.owner(k) for k in keys]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([keys, members]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    ).stdout
    assert json.loads(out) == [ring.owner(k) for k in keys]
    # str and utf-8 bytes hash to the same position; the value is pinned (blake2b-64).
    assert key_position("abc") == key_position(b"abc") == 0xD8BB14D833D59559


def test_successors_are_distinct_and_start_with_owner():
    ring = HashRing([f"w{i}" for i in range(5)])
    for k in KEYS[:2000]:
        succ = ring.successors(k, 3)
        assert len(succ) == 3 and len(set(succ)) == 3
        assert succ[0] == ring.owner(k)
    assert sorted(ring.successors("x", 10)) == sorted(ring.members)  # capped at ring size


def test_ranges_partition_the_ring():
    ring = HashRing(["a", "b", "c"])
    ranges = list(ring.ranges())
    assert ranges[0].start == 0 and ranges[-1].end == RING_SIZE
    for prev, cur in zip(ranges, ranges[1:]):
        assert prev.end == cur.start and prev.owner != cur.owner  # merged, gap-free
    for p in POSITIONS[:3000]:
        (covering,) = [r for r in ranges if p in r]
        assert covering.owner == ring.owner_of_position(p)


@pytest.mark.parametrize(
    "change",
    ["join", "leave", "reweight", "two_joins", "replace"],
)
@pytest.mark.parametrize("replicas", [1, 3])
def test_diff_matches_brute_force_key_sampling(change, replicas):
    old = HashRing([f"w{i}" for i in range(4)])
    new = {
        "join": lambda: old.with_member("w9"),
        "leave": lambda: old.without_member("w1"),
        "reweight": lambda: old.with_member("w0", 2.0),
        "two_joins": lambda: old.with_member("x").with_member("y"),
        "replace": lambda: old.without_member("w3").with_member("w7"),
    }[change]()
    moves = diff(old, new, replicas=replicas)
    assert moves, "a membership change must move something"
    for a, b in zip(moves, moves[1:]):
        assert a.end <= b.start  # sorted, disjoint
    changed = 0
    for p in POSITIONS:
        before = tuple(old.successors_of_position(p, replicas))
        after = tuple(new.successors_of_position(p, replicas))
        move = find_move(moves, p)
        if before != after:
            changed += 1
            assert move is not None, f"position {p} changed holders but no move covers it"
            assert (move.old_owners, move.new_owners) == (before, after)
        else:
            assert move is None, f"position {p} kept its holders but a move covers it"
    assert changed > 0
    # The moved fraction of the space agrees with the sampled fraction.
    moved_space = sum(m.size for m in moves) / RING_SIZE
    assert abs(moved_space - changed / len(KEYS)) < 0.02


def test_diff_of_identical_rings_is_empty_and_from_empty_covers_everything():
    ring = HashRing(["a", "b"])
    assert diff(ring, HashRing(["b", "a"])) == []
    moves = diff(HashRing(), ring)
    assert sum(m.size for m in moves) == RING_SIZE
    assert all(m.source is None and m.target in ("a", "b") for m in moves)
    gone = diff(ring, HashRing())
    assert all(m.target is None and m.released == (m.source,) for m in gone)


def test_gained_and_released_members_for_replicated_join():
    old = HashRing(["a", "b", "c"])
    new = old.with_member("d")
    for m in diff(old, new, replicas=2):
        assert m.gained == ("d",)  # only the joiner receives data
        assert len(m.released) == 1 and m.released[0] in ("a", "b", "c")


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="weight of member 'a'"):
        HashRing({"a": 0})
    with pytest.raises(ValueError, match="member id"):
        HashRing(["bad id/with slash"])
    with pytest.raises(ValueError, match="vnodes"):
        HashRing(["a"], vnodes=0)
    with pytest.raises(ValueError, match="members"):
        HashRing.from_dict({"vnodes": 4})
    with pytest.raises(TypeError, match="key must be bytes or str"):
        key_position(123)  # type: ignore[arg-type]
    with pytest.raises(LookupError, match="no members"):
        HashRing().owner("k")
