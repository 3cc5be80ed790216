"""Clients of a worker: ``StoreClient`` (native, zero-copy on the worker's host)."""

from kilorl.store.client.store_client import StoreClient
from kilorl.store.client.streams import Consumer, Producer, StreamMessage
from kilorl.store.client.types import Versioned, WriteMode

__all__ = ["Consumer", "Producer", "StoreClient", "StreamMessage", "Versioned", "WriteMode"]
