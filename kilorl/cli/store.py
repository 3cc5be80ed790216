"""``kilorl store start|stop|status|ls|get|versions``: run and inspect a data-system worker.

``ls``, ``get`` and ``versions`` look inside a worker (``kilorl.cli.store_inspect``).

``start`` daemonizes by default (the worker re-runs itself with ``--foreground`` in a
new session, logging to ``<run-dir>/worker.log``) and returns once the worker serves.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kilorl.cli import store_inspect

    sub = parser.add_subparsers(dest="store_command", metavar="{start,stop,status,ls,get,versions}")
    start = sub.add_parser("start", help="start a worker")
    start.add_argument("--host", default="127.0.0.1", help="bind address (loopback by default)")
    start.add_argument("--port", type=int, default=31501, help="TCP port (0 = any free port)")
    auth = start.add_mutually_exclusive_group()
    auth.add_argument("--token", help="shared token clients must present (default: generated, in the run dir)")
    auth.add_argument("--insecure", action="store_true", help="no token; only allowed on a loopback host")
    dram = start.add_mutually_exclusive_group()
    dram.add_argument("--shm-size", help="DRAM arena size, e.g. 512MiB, 8GiB")
    dram.add_argument("--dram-ratio", type=float, help="DRAM arena as a share of RAM")
    start.add_argument("--disk-dir", help="spill directory of the disk tier")
    disk = start.add_mutually_exclusive_group()
    disk.add_argument("--disk-size", help="disk tier limit, e.g. 20GiB")
    disk.add_argument("--ssd-ratio", type=float, help="disk tier as a share of the file system of --disk-dir")
    start.add_argument("--device", help="torch device of the device tier (cuda:0, or cpu)")
    dev = start.add_mutually_exclusive_group()
    dev.add_argument("--device-size", help="device tier limit, e.g. 4GiB")
    dev.add_argument("--hbm-ratio", type=float, help="device tier as a share of the device's memory")
    start.add_argument("--l2-dir", help="durable directory for WRITE_THROUGH_L2 / WRITE_BACK_L2")
    start.add_argument("--tier-rule", action="append", default=[], metavar="PREFIX=TIER",
                       help="preferred tier of keys with this prefix (repeatable), e.g. policy/=device")
    start.add_argument("--max-payload", default="2GiB", help="largest frame payload")
    start.add_argument("--high-watermark", type=float, default=0.90, help="tier share that triggers demotion")
    start.add_argument("--low-watermark", type=float, default=0.75, help="tier share demotion stops at")
    start.add_argument("--write-back-queue", type=int, default=4096, help="bound of the WRITE_BACK_L2 queue")
    start.add_argument("--keep-versions", type=int, default=2, help="versions kept per published name")
    start.add_argument("--stream-capacity", type=int, default=1024, help="default unacked messages per stream")
    start.add_argument("--ack-timeout", type=float, default=30.0, help="seconds before an unacked message is redelivered")
    start.add_argument("--run-dir", help="directory for socket, pid, token and log (default per port)")
    cl = start.add_argument_group("cluster (one of --head / --join / --metastore makes the worker a cluster member)")
    cl.add_argument("--head", action="store_true", help="host the cluster's built-in metastore")
    cl.add_argument("--join", metavar="HOST:PORT", help="join the cluster whose head worker listens here")
    cl.add_argument("--metastore", metavar="etcd://HOST:PORT", help="use etcd as the cluster's metastore")
    cl.add_argument("--cluster-name", help="name of the cluster in the metastore (several may share one etcd)")
    cl.add_argument("--member-id", help="member id in the ring (default HOST:PORT)")
    cl.add_argument("--lease-ttl", type=float, default=3.0, help="seconds without heartbeat before a worker is dead")
    cl.add_argument("--fanout", type=int, default=2, help="copies a holder serves before readers relay")
    cl.add_argument("--get-timeout", type=float, default=15.0, metavar="S",
                    help="seconds a remote read keeps trying an unreachable holder (e.g. one restarting) "
                         "before ObjectLost; a run passes store.reconnect_timeout_s")
    start.add_argument("--foreground", action="store_true", help="run in this process instead of daemonizing")
    start.add_argument("--inject-leak", type=float, metavar="BYTES_PER_S",
                       help="fault injection for drills: the worker leaks this much resident memory per second")
    start.add_argument("--inject-leak-after", type=float, default=0.0, metavar="S",
                       help="seconds after start-up before the injected leak begins")
    start.add_argument("--log-level", default="INFO")
    for name, text in (("stop", "stop a worker (clean: write-back queue flushed)"),
                       ("status", "tier usage, object counts and clients of a worker; ring and members of a cluster")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--port", type=int, default=31501)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--run-dir")
        p.add_argument("--token")
        if name == "stop":
            p.add_argument("--timeout", type=float, default=60.0)
        else:
            p.add_argument("--json", action="store_true", help="print raw JSON")
    store_inspect.add_commands(sub)


def _config(args: argparse.Namespace):
    from kilorl.store.errors import ConfigError
    from kilorl.store.local.config import WorkerConfig

    rules = []
    for rule in args.tier_rule:
        prefix, sep, tier = rule.partition("=")
        if not sep:
            raise ConfigError(f"tier_rule: expected PREFIX=TIER, got {rule!r}")
        rules.append((prefix, tier))
    return WorkerConfig(host=args.host, port=args.port, token=args.token, insecure=args.insecure, run_dir=args.run_dir,
                        shm_size=args.shm_size, dram_ratio=args.dram_ratio, disk_dir=args.disk_dir,
                        disk_size=args.disk_size, ssd_ratio=args.ssd_ratio, device=args.device,
                        device_size=args.device_size, hbm_ratio=args.hbm_ratio, l2_dir=args.l2_dir,
                        max_payload=args.max_payload, tier_rules=rules, high_watermark=args.high_watermark,
                        low_watermark=args.low_watermark, write_back_queue=args.write_back_queue,
                        keep_versions=args.keep_versions, stream_capacity=args.stream_capacity,
                        ack_timeout_s=args.ack_timeout)


def _cluster_config(args: argparse.Namespace):
    if not (args.head or args.join or args.metastore):
        return None
    from kilorl.store.errors import ConfigError
    from kilorl.store.mesh.node import MeshConfig

    name = args.cluster_name or "default"
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"cluster_name: use letters, digits, '-' and '_', got {name!r}")
    return MeshConfig(head=args.head, join=args.join, metastore=args.metastore, member_id=args.member_id,
                      lease_ttl=args.lease_ttl, fanout=args.fanout, get_timeout=args.get_timeout,
                      prefix=f"/kilorl/store/{name}/")


def _run_dir(args: argparse.Namespace) -> Path:
    from kilorl.store.wire.rundir import default_run_dir

    return Path(args.run_dir) if args.run_dir else default_run_dir(args.port)


def _forward(args: argparse.Namespace) -> list[str]:
    """The start options again, for the daemon's own command line."""
    out = []
    for name in ("host", "port", "token", "shm_size", "dram_ratio", "disk_dir", "disk_size", "ssd_ratio", "device",
                 "device_size", "hbm_ratio", "l2_dir", "max_payload", "log_level", "high_watermark", "low_watermark",
                 "write_back_queue", "keep_versions", "stream_capacity", "ack_timeout"):
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    for name in ("join", "metastore", "cluster_name", "member_id", "lease_ttl", "fanout", "get_timeout", "inject_leak",
                 "inject_leak_after"):
        value = getattr(args, name)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    if args.head:
        out.append("--head")
    if args.insecure:
        out.append("--insecure")
    for rule in args.tier_rule:
        out += ["--tier-rule", rule]
    return out


def _start(args: argparse.Namespace) -> int:
    import logging

    from kilorl.store.errors import StoreError

    try:
        rc = _config(args).resolve()
        cluster = _cluster_config(args)
    except StoreError as exc:
        print(f"kilorl store start: {exc}", file=sys.stderr)
        return 2
    if args.foreground:
        from kilorl.store.mesh.launch import run_worker

        logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        if args.inject_leak:
            from kilorl.monitor.faults import LeakInjector

            logging.warning("fault injection: this store worker leaks %.1f MiB/s", args.inject_leak / 2**20)
            LeakInjector(args.inject_leak, args.inject_leak_after).start()
        try:
            return run_worker(rc, cluster)
        except StoreError as exc:
            print(f"kilorl store start: {exc}", file=sys.stderr)
            return 2
    rc.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    info_path = rc.run_dir / "worker.json"
    if info_path.exists():
        old = json.loads(info_path.read_text())
        if Path(f"/proc/{old['pid']}").exists():
            print(f"kilorl store start: a worker (pid {old['pid']}) already runs for {rc.run_dir}", file=sys.stderr)
            return 1
        info_path.unlink()
    argv = [sys.executable, "-m", "kilorl.cli.main", "store", "start", *_forward(args), "--foreground",
            "--run-dir", str(rc.run_dir)]
    log = open(rc.run_dir / "worker.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"kilorl store start: worker exited with {proc.returncode}; log: {rc.run_dir / 'worker.log'}",
                  file=sys.stderr)
            print((rc.run_dir / "worker.log").read_text()[-2000:], file=sys.stderr)
            return 1
        if info_path.exists() and json.loads(info_path.read_text()).get("pid") == proc.pid:
            info = json.loads(info_path.read_text())
            print(f"worker pid {proc.pid} serving on {info['host']}:{info['port']} (unix {info['unix']}); "
                  f"run dir {rc.run_dir}")
            return 0
        time.sleep(0.05)
    print("kilorl store start: worker did not come up within 60s", file=sys.stderr)
    return 1


def _stop(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args)
    try:
        pid = json.loads((run_dir / "worker.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        print(f"kilorl store stop: no worker found in {run_dir}", file=sys.stderr)
        return 1
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        print(f"kilorl store stop: worker {pid} is not running (stale run dir {run_dir})", file=sys.stderr)
        return 1
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or not (run_dir / "worker.json").exists():
            print(f"worker {pid} stopped")
            return 0
        time.sleep(0.05)
    print(f"kilorl store stop: worker {pid} still running after {args.timeout}s", file=sys.stderr)
    return 1


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f}{unit}" if unit != "B" else f"{n}B"
        n /= 1024
    return str(n)


def _status(args: argparse.Namespace) -> int:
    from kilorl.store.client import StoreClient
    from kilorl.store.errors import StoreError

    try:
        with StoreClient(f"{args.host}:{args.port}", token=args.token, run_dir=args.run_dir, zero_copy=False) as c:
            s = c.stats()
    except (OSError, StoreError) as exc:
        print(f"kilorl store status: cannot reach worker at {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(s, indent=2, default=str))
        return 0
    print(f"worker pid {s['pid']}  objects {s['objects']}  clients {s['clients']}  leases {s['leases']}")
    for tier, t in s["tiers"].items():
        if "capacity" in t:
            pct = 100 * t["used"] / t["capacity"] if t["capacity"] else 0
            print(f"  {tier:7s} {_fmt(t['used']):>10s} / {_fmt(t['capacity']):>10s} ({pct:4.1f}%)  "
                  f"objects {t['objects']}  pinned {t['pinned']}")
        else:
            print(f"  {tier:7s} objects {t['objects']}")
    print(f"  l2      dir {s['l2']['dir']}  write-back queue {s['l2']['queue']}  flushed {s['l2']['flushed']}")
    print(f"  counters {s['counters']}")
    if s["versions"]:
        print(f"  versions {s['versions']}")
    if s["streams"]:
        print(f"  streams {s['streams']}")
    if "cluster" in s:
        _print_cluster(s["cluster"], args)
    return 0


def _print_cluster(cl: dict, args: argparse.Namespace) -> None:
    """Ring, members and per-member usage, asking every member for its own numbers."""
    from kilorl.store.errors import StoreError
    from kilorl.store.wire.peers import PeerConn

    print(f"cluster: member {cl['id']}  ring epoch {cl['epoch']}  metastore {cl['metastore']}  "
          f"vnodes {cl['ring']['vnodes']}")
    print(f"  {'member':22s} {'address':22s} {'ring share':>10s} {'objects':>8s} {'dram used':>10s} "
          f"{'records':>8s} {'primaries':>9s} {'replicas':>8s} {'sent':>10s}")
    token = args.token or _read_token(args)
    for member in sorted(set(cl["members"]) | set(cl["ring"]["members"])):
        address = cl["members"].get(member, "?")
        share = cl["ring"]["ownership"].get(member)
        try:
            conn = PeerConn(address, token, timeout=5)
            try:
                info = conn.call({"op": "c.info"})[0]
            finally:
                conn.close()
            u = info["usage"]
            print(f"  {member:22s} {address:22s} {100 * (share or 0):9.1f}% {u['objects']:8d} "
                  f"{_fmt(u['dram_used']):>10s} {info['records']:8d} {info['primaries']:9d} {info['replicas']:8d} "
                  f"{_fmt(info['counters']['bytes_served']):>10s}")
        except (OSError, StoreError, ValueError) as exc:
            print(f"  {member:22s} {address:22s} {100 * (share or 0):9.1f}%  unreachable: {exc}")


def _read_token(args: argparse.Namespace) -> str | None:
    try:
        return (_run_dir(args) / "token").read_text().strip()
    except OSError:
        return None


def run(args: argparse.Namespace) -> int:
    command = getattr(args, "store_command", None)
    if command == "start":
        return _start(args)
    if command == "stop":
        return _stop(args)
    if command == "status":
        return _status(args)
    if command in ("ls", "get", "versions"):
        from kilorl.cli import store_inspect

        return store_inspect.run(args)
    print("usage: kilorl store {start,stop,status,ls,get,versions} ...", file=sys.stderr)
    return 2
