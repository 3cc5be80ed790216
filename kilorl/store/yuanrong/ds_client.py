"""``DsClient``: one connection, three views (``kv()``, ``hetero()``, ``object()``)."""

from __future__ import annotations

from kilorl.store.client import StoreClient
from kilorl.store.yuanrong.hetero_client import HeteroClient
from kilorl.store.yuanrong.kv_client import KVClient
from kilorl.store.yuanrong.object_client import ObjectClient
from kilorl.store.yuanrong.util import Validator


class DsClient:
    """openYuanrong's client manager; ``init()`` opens one native connection for all three."""

    def __init__(self, host: str, port: int, connect_timeout_ms: int = 60000, token: str = "",
                 client_public_key: str = "", client_private_key: str = "", server_public_key: str = "",
                 access_key: str = "", secret_key: str = "", tenant_id: str = "",
                 enable_cross_node_connection: bool = False, req_timeout_ms: int = 0,
                 enable_exclusive_connection: bool = False):
        Validator.check_args_types([["req_timeout_ms", req_timeout_ms, int]])
        common = dict(connect_timeout_ms=connect_timeout_ms, token=token, client_public_key=client_public_key,
                      client_private_key=client_private_key, server_public_key=server_public_key,
                      access_key=access_key, secret_key=secret_key, tenant_id=tenant_id)
        cross = dict(enable_cross_node_connection=enable_cross_node_connection)
        self._kv_client = KVClient(host, port, **common, **cross)
        self._hetero_client = HeteroClient(host, port, **common, **cross)
        self._object_client = ObjectClient(host, port, **common)

    def init(self) -> None:
        """Connects (``RuntimeError`` if the worker cannot be reached)."""
        self._kv_client.init()
        store = self._kv_client.store
        self._hetero_client._attach(store)
        self._object_client._attach(store)

    def kv(self) -> KVClient:
        return self._kv_client

    def hetero(self) -> HeteroClient:
        return self._hetero_client

    def object(self) -> ObjectClient:
        return self._object_client

    def native(self) -> StoreClient:
        """The underlying kiloRL client (versions, streams, ranges): not in openYuanrong."""
        return self._kv_client.store

    def shutdown(self) -> None:
        """Closes the connection (not in openYuanrong, whose clients close when collected)."""
        self._kv_client.close()
        self._hetero_client._store = None
        self._object_client._store = None
