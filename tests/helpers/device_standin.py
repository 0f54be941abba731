"""A stand-in for a GPU backend where there is none: numpy arrays that trdb counts as a device's."""
from __future__ import annotations

from trdb.kernels.numpy_backend import NumpyBackend


class DeviceStandIn(NumpyBackend):
    """numpy arrays standing in for a GPU's: what trdb counts against the device's own budget."""

    @property
    def on_host(self) -> bool:
        return False

    def device_memory(self) -> int:
        return 1 << 30
