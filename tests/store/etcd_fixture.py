"""A real etcd server for tests: one per test session, on free loopback ports.

Import the fixture into a test module with
``from tests.store.etcd_fixture import etcd_server  # noqa: F401``.
It lives here rather than in tests/store/conftest.py so that this area's
fixtures stay separate from the single-node store's.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from kilorl.store.metastore.etcd_process import EtcdProcess


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory) -> Iterator[EtcdProcess]:
    """A running etcd (killed at the end of the session, even on failure)."""
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed: run `bash scripts/services.sh` (Debian etcd-server)")
    server = EtcdProcess(data_dir=tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
