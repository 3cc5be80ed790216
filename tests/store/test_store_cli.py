"""``kilorl store start|status|stop`` as a user runs them (daemon mode)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from kilorl.store import StoreClient, WriteMode


def kilorl(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kilorl.cli.main", "store", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_start_status_stop_daemon(tmp_path):
    run_dir = tmp_path / "run"
    r = kilorl("start", "--port", "0", "--shm-size", "32MiB", "--run-dir", str(run_dir), "--l2-dir",
               str(tmp_path / "l2"))
    assert r.returncode == 0, r.stderr
    info = json.loads((run_dir / "worker.json").read_text())
    try:
        port = info["port"]
        # No --token given: the worker generated one; local clients find it in the run dir.
        c = StoreClient(f"127.0.0.1:{port}", run_dir=str(run_dir))
        c.set("x", np.arange(10), write_mode=WriteMode.WRITE_BACK_L2)
        st = kilorl("status", "--port", str(port), "--run-dir", str(run_dir))
        assert st.returncode == 0, st.stderr
        assert "objects 1" in st.stdout and "dram" in st.stdout
        js = json.loads(kilorl("status", "--port", str(port), "--run-dir", str(run_dir), "--json").stdout)
        assert js["objects"] == 1 and js["tiers"]["dram"]["capacity"] == 32 << 20
        again = kilorl("start", "--port", str(port), "--shm-size", "32MiB", "--run-dir", str(run_dir))
        assert again.returncode == 1 and "already runs" in again.stderr
        c.close()
    finally:
        stop = kilorl("stop", "--port", str(info["port"]), "--run-dir", str(run_dir))
    assert stop.returncode == 0, stop.stderr
    assert not (run_dir / "worker.json").exists()
    assert kilorl("status", "--port", str(info["port"]), "--run-dir", str(run_dir)).returncode == 1


def test_bad_options_are_named(tmp_path):
    r = kilorl("start", "--foreground", "--shm-size", "lots", "--run-dir", str(tmp_path))
    assert r.returncode == 2 and "shm_size" in r.stderr
    r = kilorl("start", "--foreground", "--host", "0.0.0.0", "--insecure", "--shm-size", "8MiB",
               "--run-dir", str(tmp_path))
    assert r.returncode == 2 and "insecure" in r.stderr
    r = kilorl("start", "--foreground", "--disk-size", "1GiB", "--shm-size", "8MiB", "--run-dir", str(tmp_path))
    assert r.returncode == 2 and "disk_dir" in r.stderr
    r = kilorl("stop", "--port", "1", "--run-dir", str(tmp_path / "none"))
    assert r.returncode == 1 and "no worker" in r.stderr


def test_busy_port_and_bad_device_fail_clearly(tmp_path, workers):
    w = workers("--shm-size", "8MiB")
    r = kilorl("start", "--foreground", "--port", str(w.port), "--shm-size", "8MiB", "--run-dir", str(tmp_path / "x"))
    assert r.returncode == 2 and "port" in r.stderr and "Traceback" not in r.stderr
    r = kilorl("start", "--foreground", "--device", "npu:0", "--device-size", "1GiB", "--shm-size", "8MiB",
               "--run-dir", str(tmp_path / "y"))
    assert r.returncode == 2 and "device" in r.stderr and "Traceback" not in r.stderr
    assert w.alive()


def test_an_arena_larger_than_shared_memory_is_refused_at_once(tmp_path):
    """Prefaulting tmpfs pages past its limit would SIGBUS the worker (or fill the machine's RAM)."""
    from kilorl.store.wire.shm import SHM_DIR

    proc = subprocess.Popen([sys.executable, "-m", "kilorl.cli.main", "store", "start", "--foreground", "--port", "0",
                             "--shm-size", "64TiB", "--run-dir", str(tmp_path / "run"), "--insecure"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "does not fit in" in err and "--shm-size" in err
    assert list(SHM_DIR.glob(f"kilorl-store-{proc.pid}-*")) == []  # this worker left no arena file behind


def test_ls_get_and_versions_show_keys_and_published_names_with_their_tier_and_size(workers, tmp_path):
    w = workers("--shm-size", "32MiB", "--keep-versions", "3")
    c = w.client()
    c.set("cfg/run", b"hello")
    for v in (1, 2, 3, 4):
        c.publish("policy/shard/0", np.full(1000, v, np.float32), version=v)
    base = ["--port", str(w.port), "--token", w.token]
    ls = kilorl("ls", *base)
    assert ls.returncode == 0, ls.stderr
    lines = {line.split()[0]: line.split() for line in ls.stdout.splitlines()[1:]}
    assert lines["cfg/run"] == ["cfg/run", "key", "dram", "5B"]
    assert lines["policy/shard/0"][1:4] == ["versioned", "4", "dram"]  # its latest version
    rows = json.loads(kilorl("ls", "policy/", *base, "--json").stdout)
    assert [(r["name"], r["version"]) for r in rows] == [("policy/shard/0", 4)] and rows[0]["size"] >= 4000
    versions = json.loads(kilorl("versions", "policy/shard/0", *base, "--json").stdout)
    assert [r["version"] for r in versions] == [2, 3, 4]  # --keep-versions 3: version 1 was reclaimed
    assert {r["worker"] for r in versions} == {w.address}
    got = kilorl("get", "cfg/run", *base)
    assert got.returncode == 0 and got.stdout == "hello"
    assert kilorl("get", "policy/shard/0", *base, "-o", str(tmp_path / "p.npy")).returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), np.full(1000, 4, np.float32))
    assert kilorl("get", "policy/shard/0", "--version", "2", *base, "-o", str(tmp_path / "p2.npy")).returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "p2.npy"), np.full(1000, 2, np.float32))
    missing = kilorl("get", "nothing/here", *base)
    assert missing.returncode == 1 and "no key or versioned name 'nothing/here'" in missing.stderr
    assert kilorl("versions", "nothing", *base).returncode == 1
    assert c.keys("") == ["cfg/run"]  # keys() lists no versioned names: version_list() does
    assert [r["version"] for r in c.version_list("policy/")["policy/shard/0"]] == [2, 3, 4]
