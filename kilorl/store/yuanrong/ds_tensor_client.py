"""``DsTensorClient``: the hetero API on whole torch tensors, and ``CopyRange`` reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kilorl.store.yuanrong.errors import invalid
from kilorl.store.yuanrong.hetero_client import Blob, DeviceBlobList, Future, HeteroClient
from kilorl.store.yuanrong.kv_client import SetParam
from kilorl.store.yuanrong.util import Validator


@dataclass
class CopyRange:
    """Copy ``length`` bytes from ``src_offset`` of a stored object to ``dst_offset`` of a tensor."""

    src_offset: int
    dst_offset: int
    length: int


def _tensor_type() -> type:
    import torch

    return torch.Tensor


class DsTensorClient:
    """openYuanrong's tensor client for device ``device_id``."""

    def __init__(self, host: str, port: int, device_id: int, connect_timeout_ms: int = 60000,
                 client_public_key: str = "", client_private_key: str = "", server_public_key: str = "",
                 req_timeout_ms: int = 0, enable_remote_h2d: bool = False, token: str = ""):
        Validator.check_args_types([["device_id", device_id, int], ["req_timeout_ms", req_timeout_ms, int]])
        self._hetero_client = HeteroClient(host, port, connect_timeout_ms, token, client_public_key,
                                           client_private_key, server_public_key,
                                           enable_remote_h2d=enable_remote_h2d)
        self._device_id = device_id

    def init(self) -> None:
        self._hetero_client.init()

    def _lists(self, tensors: Any) -> list[DeviceBlobList]:
        Validator.check_args_types([["tensors", tensors, list]])
        tensor_type = _tensor_type()
        for t in tensors:
            if not isinstance(t, tensor_type):
                raise invalid(f"tensors: items must be torch tensors, got {type(t).__name__}")
        return [DeviceBlobList(self._device_id, [Blob(t)]) for t in tensors]

    def mset_d2h(self, keys: list[str], tensors: list[Any], set_param: SetParam | None = None) -> None:
        self._hetero_client.mset_d2h(keys, self._lists(tensors), set_param)

    def mget_h2d(self, keys: list[str], tensors: list[Any], sub_timeout_ms: int = 0) -> list[str]:
        return self._hetero_client.mget_h2d(keys, self._lists(tensors), sub_timeout_ms)

    def async_mset_d2h(self, keys: list[str], tensors: list[Any], set_param: SetParam | None = None) -> Future:
        return self._hetero_client.async_mset_d2h(keys, self._lists(tensors), set_param)

    def async_mget_h2d(self, keys: list[str], tensors: list[Any], sub_timeout_ms: int = 0) -> Future:
        return self._hetero_client.async_mget_h2d(keys, self._lists(tensors), sub_timeout_ms)

    def dev_mset(self, keys: list[str], tensors: list[Any]) -> list[str]:
        return self._hetero_client.dev_mset(keys, self._lists(tensors))

    def dev_mget(self, keys: list[str], tensors: list[Any], sub_timeout_ms: int = 0) -> list[str]:
        return self._hetero_client.dev_mget(keys, self._lists(tensors), sub_timeout_ms)

    def dev_mget_into_tensor(self, keys: list[str], tensor: Any, copy_ranges: list[CopyRange],
                             sub_timeout_ms: int = 60000) -> list[str]:
        """Copies byte ranges of several objects into one tensor; returns the failed keys."""
        Validator.check_args_types([["keys", keys, list], ["copy_ranges", copy_ranges, list],
                                    ["sub_timeout_ms", sub_timeout_ms, int]])
        if not isinstance(tensor, _tensor_type()):
            raise invalid(f"tensor: must be a torch tensor, got {type(tensor).__name__}")
        if len(keys) != len(copy_ranges):
            raise invalid(f"The length of keys and copy_ranges do not match, keys:{len(keys)}, "
                          f"copy_ranges:{len(copy_ranges)}")
        if not tensor.is_contiguous():
            raise invalid("tensor: must be contiguous")
        import torch

        flat = tensor.reshape(-1).view(torch.uint8)
        lists = []
        for r in copy_ranges:
            if not isinstance(r, CopyRange) or r.dst_offset < 0 or r.length <= 0 or \
                    r.dst_offset + r.length > flat.numel():
                raise invalid(f"copy_ranges: {r!r} does not fit the tensor's {flat.numel()} bytes")
            lists.append(DeviceBlobList(self._device_id, [Blob(flat[r.dst_offset:r.dst_offset + r.length])],
                                        r.src_offset))
        return self._hetero_client.dev_mget(keys, lists, sub_timeout_ms)

    def delete(self, keys: list[str] | None = None) -> list[str]:
        return self._hetero_client.delete(keys)

    def dev_delete(self, keys: list[str] | None = None) -> list[str]:
        return self._hetero_client.dev_delete(keys)

    def async_dev_delete(self, keys: list[str] | None = None) -> Future:
        return self._hetero_client.async_dev_delete(keys)

    def dev_local_delete(self, keys: list[str]) -> list[str]:
        return self._hetero_client.dev_local_delete(keys)

    def exist(self, keys: list[str]) -> list[bool]:
        return self._hetero_client.exist(keys)

    def close(self) -> None:
        """Closes the connection (not in openYuanrong, whose clients close when collected)."""
        self._hetero_client.close()
