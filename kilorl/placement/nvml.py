"""A small adapter over NVML so discovery can run against the real library or a recording.

``PynvmlSource`` calls ``nvidia-ml-py`` (module ``pynvml``); ``record(source)`` asks a source
every question discovery asks and returns the answers as JSON-able data;
``RecordedSource`` replays such a recording. ``kilorl topo --record-nvml FILE`` captures one
on a GPU machine, and the tests replay captures in ``tests/placement/fixtures``.
"""

from __future__ import annotations

from typing import Any, Protocol


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no driver, no GPU); the message says why."""


class NvmlSource(Protocol):
    def open(self) -> None:
        """Initialize; raises NvmlUnavailable with the reason."""

    def close(self) -> None: ...

    def driver_version(self) -> str: ...

    def device_count(self) -> int: ...

    def name(self, i: int) -> str: ...

    def memory_total(self, i: int) -> int:
        """Bytes of device memory."""

    def uuid(self, i: int) -> str: ...

    def pci_bus_id(self, i: int) -> str: ...

    def numa_node(self, i: int) -> int | None: ...

    def common_ancestor(self, i: int, j: int) -> int:
        """NVML topology level (0 internal, 10 single switch, ..., 50 system)."""

    def nvlink_remotes(self, i: int) -> list[str]:
        """PCI bus ids at the far end of each active NVLink (a GPU or an NVSwitch)."""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlSource:
    """The real NVML through ``pynvml`` (package ``nvidia-ml-py``)."""

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: dict[int, Any] = {}

    def open(self) -> None:
        try:
            import pynvml
        except ImportError as err:  # pragma: no cover - it is a dependency
            raise NvmlUnavailable(f"nvidia-ml-py is not installed ({err})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NvmlUnavailable(f"NVML could not start: {err}") from None
        self._nv = pynvml

    def close(self) -> None:
        if self._nv is not None:
            self._nv.nvmlShutdown()
            self._nv = None

    def _h(self, i: int) -> Any:
        if i not in self._handles:
            self._handles[i] = self._nv.nvmlDeviceGetHandleByIndex(i)
        return self._handles[i]

    def driver_version(self) -> str:
        return _s(self._nv.nvmlSystemGetDriverVersion())

    def device_count(self) -> int:
        return int(self._nv.nvmlDeviceGetCount())

    def name(self, i: int) -> str:
        return _s(self._nv.nvmlDeviceGetName(self._h(i)))

    def memory_total(self, i: int) -> int:
        return int(self._nv.nvmlDeviceGetMemoryInfo(self._h(i)).total)

    def uuid(self, i: int) -> str:
        return _s(self._nv.nvmlDeviceGetUUID(self._h(i)))

    def pci_bus_id(self, i: int) -> str:
        return _s(self._nv.nvmlDeviceGetPciInfo(self._h(i)).busId)

    def numa_node(self, i: int) -> int | None:
        try:
            return int(self._nv.nvmlDeviceGetNumaNodeId(self._h(i)))
        except (self._nv.NVMLError, AttributeError):
            return None

    def common_ancestor(self, i: int, j: int) -> int:
        return int(self._nv.nvmlDeviceGetTopologyCommonAncestor(self._h(i), self._h(j)))

    def nvlink_remotes(self, i: int) -> list[str]:
        nv, out = self._nv, []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                if nv.nvmlDeviceGetNvLinkState(self._h(i), link) != nv.NVML_FEATURE_ENABLED:
                    continue
                out.append(_s(nv.nvmlDeviceGetNvLinkRemotePciInfo(self._h(i), link).busId))
            except nv.NVMLError:
                # Links past the device's count answer NOT_SUPPORTED / INVALID_ARGUMENT.
                continue
        return out


def record(source: NvmlSource) -> dict[str, Any]:
    """Every answer discovery needs, as plain data (the format ``RecordedSource`` reads)."""
    source.open()
    try:
        n = source.device_count()
        return {
            "format": "kilorl-nvml-recording/1",
            "driver_version": source.driver_version(),
            "devices": [
                {"name": source.name(i), "memory_total": source.memory_total(i), "uuid": source.uuid(i),
                 "pci_bus_id": source.pci_bus_id(i), "numa_node": source.numa_node(i),
                 "nvlink_remotes": source.nvlink_remotes(i)}
                for i in range(n)
            ],
            "common_ancestor": [[source.common_ancestor(i, j) for j in range(n)] for i in range(n)],
        }
    finally:
        source.close()


class RecordedSource:
    """Replays a ``record`` capture; ``error`` replays a failed ``nvmlInit``."""

    def __init__(self, data: dict[str, Any]) -> None:
        if data.get("format") != "kilorl-nvml-recording/1":
            raise ValueError(f"not an NVML recording (format={data.get('format')!r})")
        self.data = data

    def open(self) -> None:
        if self.data.get("error"):
            raise NvmlUnavailable(self.data["error"])

    def close(self) -> None:
        pass

    def driver_version(self) -> str:
        return self.data["driver_version"]

    def device_count(self) -> int:
        return len(self.data["devices"])

    def _d(self, i: int) -> dict[str, Any]:
        return self.data["devices"][i]

    def name(self, i: int) -> str:
        return self._d(i)["name"]

    def memory_total(self, i: int) -> int:
        return int(self._d(i)["memory_total"])

    def uuid(self, i: int) -> str:
        return self._d(i)["uuid"]

    def pci_bus_id(self, i: int) -> str:
        return self._d(i)["pci_bus_id"]

    def numa_node(self, i: int) -> int | None:
        return self._d(i).get("numa_node")

    def common_ancestor(self, i: int, j: int) -> int:
        return int(self.data["common_ancestor"][i][j])

    def nvlink_remotes(self, i: int) -> list[str]:
        return list(self._d(i).get("nvlink_remotes", []))
