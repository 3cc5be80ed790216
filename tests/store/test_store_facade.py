"""``kilorl.store.facade`` is kept as an alias of ``kilorl.store.yuanrong``."""

from __future__ import annotations

from kilorl import store
from kilorl.store import facade, yuanrong


def test_the_facade_names_are_the_yuanrong_classes():
    for name in ("DsClient", "KVClient", "HeteroClient", "ObjectClient", "StreamClient", "Blob", "DeviceBlobList",
                 "WriteMode"):
        assert getattr(facade, name) is getattr(yuanrong, name)
    assert store.DsClient is yuanrong.DsClient
