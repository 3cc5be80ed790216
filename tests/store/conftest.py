"""Fixtures that run real data-system worker processes (no in-process fakes)."""

from __future__ import annotations

import pytest
from store_helpers import TOKEN, WorkerProcess


@pytest.fixture
def workers(tmp_path):
    """Factory of worker processes; every one is killed at teardown, even on failure."""
    started: list[WorkerProcess] = []

    def make(*args: str, token: str | None = TOKEN, name: str | None = None, start: bool = True) -> WorkerProcess:
        w = WorkerProcess(tmp_path, *args, token=token, name=name or f"w{len(started)}")
        started.append(w)
        return w.start() if start else w

    yield make
    for w in started:
        if w.alive():
            w.proc.kill()
            w.proc.wait(10)
        w.remove_arena()


@pytest.fixture
def worker(workers):
    """A worker with a 64 MiB arena and nothing else."""
    return workers("--shm-size", "64MiB")


@pytest.fixture
def client(worker):
    c = worker.client()
    yield c
    c.close()


@pytest.fixture
def cluster_of(workers, tmp_path):
    """``cluster_of(metastore)`` -> a Cluster whose workers the ``workers`` fixture kills at teardown."""
    from cluster_helpers import Cluster

    def make(metastore: str = "builtin", **kw) -> Cluster:
        return Cluster(workers, tmp_path, metastore, **kw)

    return make


@pytest.fixture(scope="module")
def head_worker(tmp_path_factory):
    """A worker started with ``--head``: its built-in metastore served over the store protocol."""
    w = WorkerProcess(tmp_path_factory.mktemp("head"), "--shm-size", "8MiB", "--head", name="head").start()
    try:
        yield w
    finally:
        if w.alive():
            w.proc.kill()
            w.proc.wait(10)
        w.remove_arena()
