"""Fixtures of the openYuanrong-compatibility tests: real workers, clients built as
openYuanrong code builds them (``KVClient(host, port, token=...)`` then ``init()``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def yr_worker(workers, tmp_path):
    """A worker with a 64 MiB arena and an L2 directory (write-through / write-back modes)."""
    return workers("--shm-size", "64MiB", "--l2-dir", str(tmp_path / "l2"))


@pytest.fixture
def connect(yr_worker):
    """``connect(Cls, *args)`` -> an initialised openYuanrong-style client of ``yr_worker``."""
    made = []

    def make(cls, *args, **kw):
        client = cls("127.0.0.1", yr_worker.port, *args, token=yr_worker.token, **kw)
        client.init()
        made.append(client)
        return client

    yield make
    for c in made:
        if hasattr(c, "close"):
            c.close()
