"""A real store worker for the parameter-store tests (the store's own helper starts it)."""

from __future__ import annotations

import pytest

from tests.store.store_helpers import WorkerProcess


@pytest.fixture
def store_worker(tmp_path):
    w = WorkerProcess(tmp_path, "--shm-size", "256MiB", name="params").start()
    yield w
    if w.alive():
        w.proc.kill()
        w.proc.wait(10)
    w.remove_arena()
