"""One node exporter serves every role process of its node; dead and hung roles disappear."""

from __future__ import annotations

import math
import os
import signal
import socket
import struct
import subprocess

import msgpack
import pytest

from kilorl.monitor import NodeExporter, RoleMetrics
from kilorl.monitor.wire import MAX_FRAME_BYTES
from tests.monitor.conftest import PROMTOOL, wait_for
from tests.monitor.helpers import CPU_METRICS, identities, sample_name, series

ROLES = [("actor", 0), ("actor", 1), ("learner", 0)]


def _all_roles_everywhere(exp, roles, node):
    text = exp.metrics_text()
    want = {(r, str(k), node) for r, k in roles}
    return all(want <= identities(text, sample_name(m)) for m in CPU_METRICS if "leak_slope" not in m.name) and text


def test_roles_in_separate_processes_are_served_by_one_exporter_with_their_labels(spawn_exporter, spawn_role):
    exp = spawn_exporter("n0")
    for role, rank in ROLES:
        spawn_role(role, rank, "n0", exp.socket, "--interval", "0.2")
    text = wait_for(lambda: _all_roles_everywhere(exp, ROLES, "n0"), 30, "every role's series on the exporter")
    s = series(text)
    steps = {lab["role"] + lab["rank"]: v for lab, v in s["kilorl_env_steps_total"]}
    assert set(steps) == {"actor0", "actor1", "learner0"} and all(v > 0 for v in steps.values())
    up = {(lab["role"], lab["rank"]) for lab, v in s["kilorl_role_up"] if v == 1.0}
    assert up == {(r, str(k)) for r, k in ROLES}


def test_exposition_passes_promtool_check_metrics(spawn_exporter, spawn_role):
    exp = spawn_exporter("n0")
    for role, rank in ROLES:
        spawn_role(role, rank, "n0", exp.socket, "--interval", "0.2")
    text = wait_for(lambda: _all_roles_everywhere(exp, ROLES, "n0"), 30, "every role's series")
    out = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_killed_role_loses_its_series_at_once_and_the_others_keep_theirs(spawn_exporter, spawn_role):
    exp = spawn_exporter("n0")
    procs = {(role, rank): spawn_role(role, rank, "n0", exp.socket, "--interval", "0.2") for role, rank in ROLES}
    wait_for(lambda: _all_roles_everywhere(exp, ROLES, "n0"), 30, "every role's series")
    procs[("actor", 1)].send_signal(signal.SIGKILL)
    gone = ("actor", "1", "n0")
    text = wait_for(lambda: (t := exp.metrics_text()) and gone not in identities(t, "kilorl_env_steps_total") and t,
                    5, "the killed role's series to disappear")
    assert identities(text, "kilorl_env_steps_total") == {("actor", "0", "n0"), ("learner", "0", "n0")}
    assert gone not in identities(text, "kilorl_role_up")
    assert series(text)["kilorl_exporter_roles_departed_total"][0][1] == 1.0


def test_a_hung_role_is_dropped_after_stale_after_s(spawn_exporter, spawn_role):
    exp = spawn_exporter("n0", stale_after_s=2.0)
    proc = spawn_role("actor", 0, "n0", exp.socket, "--interval", "0.2")
    wait_for(lambda: ("actor", "0", "n0") in identities(exp.metrics_text(), "kilorl_role_up"), 30, "the role to report")
    proc.send_signal(signal.SIGSTOP)  # connection stays open, no more snapshots
    try:
        wait_for(lambda: ("actor", "0", "n0") not in identities(exp.metrics_text(), "kilorl_role_up"), 10,
                 "the hung role's series to be dropped")
    finally:
        proc.send_signal(signal.SIGCONT)
    # It comes back once it reports again.
    wait_for(lambda: ("actor", "0", "n0") in identities(exp.metrics_text(), "kilorl_role_up"), 10, "the role to return")


def _raw(sock_path: str, payload: bytes) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(payload)
    return s


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",  # not msgpack
        struct.pack(">I", MAX_FRAME_BYTES + 1),  # oversized
        (lambda b: struct.pack(">I", len(b)) + b)(msgpack.packb({"v": 1, "role": "x", "rank": "zero", "node": "n",
                                                                 "pid": 1, "time": 0.0, "families": []})),
    ],
    ids=["garbage", "oversized", "wrong-type"],
)
def test_a_malformed_frame_closes_that_connection_not_the_server(short_dir, payload):
    with NodeExporter("n0", short_dir / "n0.sock") as exp:
        good = RoleMetrics("actor", 0, "n0", sink=exp.socket_path, sample_resources=False)
        good.inc_env_steps(7)
        assert good.push()
        bad = _raw(exp.socket_path, payload)
        bad.settimeout(5)
        assert bad.recv(1) == b""  # the exporter closed it
        bad.close()
        good.inc_env_steps(1)
        assert good.push()
        wait_for(lambda: series(exp.exposition().decode())["kilorl_env_steps_total"][0][1] == 8.0, 5, "the good role's update")
        good.close()


def test_wire_errors_name_the_field():
    from kilorl.monitor.wire import WireError, decode_snapshot

    body = msgpack.packb({"v": 1, "role": "a", "rank": 0, "node": "n", "pid": 1, "time": 0.0,
                          "families": [["kilorl_x", "summary", "h", []]]})
    with pytest.raises(WireError, match="type must be one of"):
        decode_snapshot(body)
    body = msgpack.packb({"v": 1, "role": "a", "rank": 0, "node": "n", "pid": 1, "time": 0.0,
                          "families": [["kilorl_x", "gauge", "h", [["kilorl_x", {}, float("nan")]]]]})
    with pytest.raises(WireError, match="value must be a number"):
        decode_snapshot(body)
    with pytest.raises(WireError, match="'pid' is missing"):
        decode_snapshot(msgpack.packb({"v": 1, "role": "a", "rank": 0, "node": "n", "time": 0.0, "families": []}))


def test_the_exporter_stamps_the_senders_identity_over_spoofed_labels(short_dir):
    with NodeExporter("n0", short_dir / "n0.sock") as exp:
        m = RoleMetrics("actor", 3, "n0", sink=exp.socket_path, sample_resources=False)
        m.inc_env_steps(1)
        snap = m.snapshot()
        fam = next(f for f in snap.families if f.name == "kilorl_env_steps")
        name, labels, v = fam.samples[0]
        fam.samples[0] = (name, {**labels, "role": "learner", "rank": "0"}, v)
        exp._receive(1, snap)
        assert identities(exp.exposition().decode(), "kilorl_env_steps_total") == {("actor", "3", "n0")}


def test_an_older_snapshot_read_late_from_another_connection_does_not_replace_the_newer_one(short_dir):
    with NodeExporter("n0", short_dir / "n0.sock") as exp:
        old, new = (RoleMetrics("actor", 0, "n0", sink=None, sample_resources=False) for _ in range(2))
        old.inc_env_steps(5)
        old_snap = old.snapshot()
        new.inc_env_steps(2)
        new_snap = new.snapshot()
        assert new_snap.time >= old_snap.time
        exp._receive(2, new_snap)
        exp._receive(1, old_snap)  # the old process's last push, read after the new one's
        assert series(exp.exposition().decode())["kilorl_env_steps_total"] == [
            ({"role": "actor", "rank": "0", "node": "n0"}, 2.0)]
        new.inc_env_steps(1)
        exp._receive(2, new.snapshot())  # the same connection always updates
        assert series(exp.exposition().decode())["kilorl_env_steps_total"][0][1] == 3.0


def test_a_role_that_closes_disappears_and_one_that_restarts_under_the_same_identity_replaces_it(short_dir):
    with NodeExporter("n0", short_dir / "n0.sock") as exp:
        a = RoleMetrics("actor", 0, "n0", sink=exp.socket_path, sample_resources=False)
        a.inc_env_steps(5)
        a.push()
        b = RoleMetrics("actor", 0, "n0", sink=exp.socket_path, sample_resources=False)
        b.inc_env_steps(2)
        b.push()
        wait_for(lambda: series(exp.exposition().decode())["kilorl_env_steps_total"] == [
            ({"role": "actor", "rank": "0", "node": "n0"}, 2.0)], 5, "the newer process's series")
        a.close()  # the old process leaving must not take the new one's series along
        assert exp.roles() == [("actor", "0", "n0")]
        b.close()
        wait_for(lambda: exp.roles() == [], 5, "the role to leave")


def test_on_cpu_device_series_are_absent_not_zero(short_dir):
    with NodeExporter("n0", short_dir / "n0.sock") as exp:
        m = RoleMetrics("actor", 0, "n0", sink=exp.socket_path)
        assert m.push()
        text = wait_for(lambda: (t := exp.exposition().decode()) and "kilorl_process_resident_memory_bytes{" in t and t,
                        5, "the role's memory series")
        s = series(text)
        rss = s["kilorl_process_resident_memory_bytes"][0][1]
        assert rss > 10 * 2**20  # a Python process is bigger than 10 MiB
        assert math.isinf(s["kilorl_memory_time_to_limit_seconds"][0][1])  # no leak: never
        if not _has_gpu():
            for name in ("kilorl_device_memory_allocated_bytes", "kilorl_device_memory_reserved_bytes",
                         "kilorl_device_process_memory_bytes", "kilorl_gpu_utilization_ratio"):
                assert name not in s
        m.close()


def _has_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl")


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="'socket_path' is longer"):
        NodeExporter("n0", "/tmp/" + "x" * 200)
    with pytest.raises(ValueError, match="'direction'"):
        RoleMetrics("actor", 0, "n0", sample_resources=False).add_comm_bytes("sideways", 1)
    with pytest.raises(ValueError, match="'role' and 'node'"):
        RoleMetrics("", 0, "n0")
