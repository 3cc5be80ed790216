"""A store cluster of real worker processes for tests: built-in metastore or etcd."""

from __future__ import annotations

import itertools
from pathlib import Path

from store_helpers import WorkerProcess, wait_until

_names = itertools.count()


class Cluster:
    """Starts workers that form one cluster; ``workers`` is the conftest factory (kills all at teardown)."""

    def __init__(self, workers, base: Path, metastore: str, lease_ttl: float = 2.0, shm: str = "64MiB",
                 extra: tuple[str, ...] = ()):
        self.extra = list(extra)
        self.make = workers
        self.metastore = metastore  # "builtin" or an etcd:// URL
        self.l2 = base / "shared-l2"
        self.lease_ttl = lease_ttl
        self.shm = shm
        self.name = f"t{next(_names)}-{base.name[-12:]}".replace(".", "-")
        self.members: list[WorkerProcess] = []
        self.head: WorkerProcess | None = None

    def _args(self) -> list[str]:
        args = ["--shm-size", self.shm, "--l2-dir", str(self.l2), "--lease-ttl", str(self.lease_ttl),
                "--cluster-name", self.name, *self.extra]
        if self.metastore == "builtin":
            args += ["--head"] if self.head is None else ["--join", self.head.address]
        else:
            args += ["--metastore", self.metastore]
        return args

    def add(self) -> WorkerProcess:
        w = self.make(*self._args(), name=f"c{len(self.members)}-{self.name}")
        if self.head is None:
            self.head = w
        self.members.append(w)
        return w

    def start(self, n: int) -> list[WorkerProcess]:
        for _ in range(n):
            self.add()
        self.wait_ring(n)
        return list(self.members)

    def ring(self, via: WorkerProcess | None = None) -> dict:
        with (via or self.head).client(zero_copy=False) as c:
            return c.stats()["cluster"]

    def wait_ring(self, n: int, timeout: float = 30.0) -> None:
        """Every live member sees a ring of exactly ``n`` members."""
        def ok():
            return all(len(self.ring(w)["ring"]["members"]) == n for w in self.members if w.alive())
        wait_until(ok, timeout, interval=0.1, what=f"a ring of {n} members")
