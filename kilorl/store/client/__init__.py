"""Clients of a worker: ``StoreClient`` (native, zero-copy on the worker's host)."""

from kilorl.store.client.store_client import Consumer, Producer, StoreClient, StreamMessage, Versioned, WriteMode

__all__ = ["Consumer", "Producer", "StoreClient", "StreamMessage", "Versioned", "WriteMode"]
