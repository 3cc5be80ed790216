"""``kilorl store ls|get|versions``: look inside a running worker (or the mesh it belongs to).

``ls`` lists keys and versioned names (a published name with its latest version), each with
its tier and size; ``get`` prints or saves one value (a key, or a versioned name's latest or
given version); ``versions`` lists the versions of one name each worker of the mesh holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

COMMANDS = {"ls": "keys and versioned names (latest version) with tier and size",
            "get": "print or save a key's value, or a versioned name's (latest) version",
            "versions": "the versions of a published name each worker holds"}


def add_commands(sub: Any) -> None:
    """The inspection subcommands of ``kilorl store``."""
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text)
        p.add_argument("--port", type=int, default=31501)
        p.add_argument("--host", default="127.0.0.1")
        p.add_argument("--run-dir")
        p.add_argument("--token")
        if name == "ls":
            p.add_argument("prefix", nargs="?", default="", help="only keys and names starting with this")
            p.add_argument("--json", action="store_true", help="print raw JSON")
        elif name == "get":
            p.add_argument("key", help="a key, or a versioned name (its latest version)")
            p.add_argument("--version", type=int, help="this version of a versioned name")
            p.add_argument("-o", "--output", metavar="FILE",
                           help="write the value here (bytes as they are, arrays as .npy, dicts of arrays as .npz)")
        else:
            p.add_argument("name", help="a published (versioned) name")
            p.add_argument("--json", action="store_true", help="print raw JSON")


def run(args: argparse.Namespace) -> int:
    from kilorl.store.client import StoreClient
    from kilorl.store.errors import StoreError

    where = f"{args.host}:{args.port}"
    try:
        with StoreClient(where, token=args.token, run_dir=args.run_dir, zero_copy=False, reconnect_timeout=0) as c:
            return {"ls": _ls, "get": _get, "versions": _versions}[args.store_command](c, args)
    except (OSError, StoreError) as exc:
        print(f"kilorl store {args.store_command}: {where}: {exc}", file=sys.stderr)
        return 1


def _members(c: Any) -> list[str]:
    """Addresses of every worker of the mesh (this one alone when it is not a cluster member)."""
    cluster = c.stats().get("cluster")
    return sorted(cluster["members"].values()) if cluster and isinstance(cluster.get("members"), dict) else [c.address]


def _held(c: Any, prefix: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """name -> worker address -> versions it holds, over the whole mesh."""
    from kilorl.store.client import StoreClient

    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for address in _members(c):
        if address == c.address:
            names = c.version_list(prefix)
        else:
            with StoreClient(address, token=c._token, zero_copy=False, reconnect_timeout=0) as other:
                names = other.version_list(prefix)
        for name, rows in names.items():
            out.setdefault(name, {})[address] = rows
    return out


def _ls(c: Any, args: argparse.Namespace) -> int:
    from kilorl.store.errors import StoreError

    rows = []
    for key in c.keys(args.prefix):
        try:
            loc = c.locate(key)
            tier, size = loc["tier"], loc["size"]
        except StoreError:  # bytes on another worker of the mesh
            tier, size = "remote", c.describe(key).get("size")
        rows.append({"name": key, "kind": "key", "version": None, "tier": tier, "size": size})
    for name, by_worker in _held(c, args.prefix).items():
        latest = max((r for rs in by_worker.values() for r in rs), key=lambda r: r["version"])
        tiers = sorted({r["tier"] for rs in by_worker.values() for r in rs if r["version"] == latest["version"]})
        rows.append({"name": name, "kind": "versioned", "version": latest["version"], "tier": ",".join(tiers),
                     "size": latest["size"]})
    rows.sort(key=lambda r: r["name"])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'NAME':<40} {'KIND':<10} {'VERSION':>8} {'TIER':<12} {'SIZE':>10}")
    for r in rows:
        version = "" if r["version"] is None else str(r["version"])
        print(f"{r['name']:<40} {r['kind']:<10} {version:>8} {r['tier']:<12} {_fmt(r['size']):>10}")
    return 0


def _versions(c: Any, args: argparse.Namespace) -> int:
    by_worker = _held(c, args.name).get(args.name)
    if not by_worker:
        print(f"kilorl store versions: no worker holds a version of {args.name!r}", file=sys.stderr)
        return 1
    rows = sorted(({"version": r["version"], "worker": w, "tier": r["tier"], "size": r["size"]}
                   for w, rs in by_worker.items() for r in rs), key=lambda r: (r["version"], r["worker"]))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'VERSION':>8} {'WORKER':<22} {'TIER':<8} {'SIZE':>10}")
    for r in rows:
        print(f"{r['version']:>8} {r['worker']:<22} {r['tier']:<8} {_fmt(r['size']):>10}")
    return 0


def _get(c: Any, args: argparse.Namespace) -> int:
    from kilorl.store.errors import KeyNotFound, VersionGone

    if args.version is None and c.exists(args.key):
        value, what = c.get(args.key), args.key
    else:
        try:
            got = c.get_version(args.key, args.version)
        except (KeyNotFound, VersionGone):
            at = "" if args.version is None else f" at version {args.version}"
            print(f"kilorl store get: no key or versioned name {args.key!r}{at}", file=sys.stderr)
            return 1
        value, what = got.value, f"{args.key} version {got.version}"
    if args.output:
        _save(value, args.output)
        print(f"{what}: written to {args.output}", file=sys.stderr)
    elif isinstance(value, (bytes, bytearray, memoryview, str)):
        data = value.encode() if isinstance(value, str) else bytes(value)
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        print(f"{what}: {_summary(value)} (-o FILE saves it)")
    return 0


def _summary(value: Any) -> str:
    import numpy as np

    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_summary(v)}" for k, v in value.items()) + "}"
    a = np.asarray(value) if not hasattr(value, "dtype") else value
    return f"{type(value).__name__} {a.dtype} {tuple(a.shape)}"


def _save(value: Any, path: str) -> None:
    import numpy as np

    def arr(v: Any) -> Any:
        return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)

    if isinstance(value, (bytes, bytearray, memoryview, str)):
        data = value.encode() if isinstance(value, str) else bytes(value)
        with open(path, "wb") as f:
            f.write(data)
    elif isinstance(value, dict):
        with open(path, "wb") as f:
            np.savez(f, **{k: arr(v) for k, v in value.items()})
    else:
        with open(path, "wb") as f:
            np.save(f, arr(value))


def _fmt(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n}B" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)
