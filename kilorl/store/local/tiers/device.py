"""Device tier: object bytes held as flat uint8 torch tensors on a torch device.

On ``cuda:N`` a reader in another process on the same node can map the tensor through
CUDA IPC (``ipc_handle`` here, ``kilorl.store.wire.cuda_ipc`` on the reader) without a copy. That path is written
for GPU machines and is UNTESTED in this repository's CI (no GPU there). On ``cpu`` the
same code runs, and readers receive a copy over the socket.
"""

from __future__ import annotations

from typing import Any

from kilorl.store.errors import ConfigError


def device_capacity(device: str) -> int:
    """Physical memory of a device in bytes (RAM for ``cpu``)."""
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"device: {device!r} is not a torch device (use cuda:N or cpu)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device: {device!r} requested but CUDA is not available in this torch build")
        return torch.cuda.get_device_properties(dev).total_memory
    if dev.type == "cpu":
        import psutil

        return psutil.virtual_memory().total
    raise ConfigError(f"device: unsupported device type {dev.type!r} (use cuda:N or cpu)")


class DeviceTier:
    """Holds tensors on one device and accounts their bytes against ``capacity``."""

    name = "device"

    def __init__(self, device: str, capacity: int):
        import torch

        device_capacity(device)  # validates the device and fails clearly
        self.torch = torch
        self.device = torch.device(device)
        self.capacity = capacity
        self.used = 0

    def free_bytes(self) -> int:
        return self.capacity - self.used

    def store(self, data: memoryview) -> Any:
        torch = self.torch
        n = data.nbytes
        host = torch.frombuffer(data, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        tensor = host.to(self.device, copy=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        self.used += n
        return tensor

    def to_host(self, tensor: Any) -> memoryview:
        """A host copy of the bytes (the CPU path, and the fallback for remote readers)."""
        t = tensor if tensor.device.type == "cpu" else tensor.cpu()
        return memoryview(t.numpy())

    def remove(self, tensor: Any) -> None:
        self.used -= tensor.numel()

    def ipc_handle(self, tensor: Any) -> dict[str, Any] | None:
        """CUDA IPC description of a tensor as plain msgpack-able fields (no pickle).

        UNTESTED here (no GPU): mirrors torch.multiprocessing's reduction of CUDA storages.
        """
        if self.device.type != "cuda":
            return None
        storage = tensor.untyped_storage()
        (dev, handle, size_bytes, offset_bytes, ref_handle, ref_offset, event_handle, event_sync) = \
            storage._share_cuda_()
        return {"dev": dev, "handle": handle, "size": size_bytes, "off": offset_bytes, "ref": ref_handle,
                "ref_off": ref_offset, "event": event_handle, "sync": event_sync, "numel": tensor.numel()}
