"""The CuPy backend: the shared kernels on a GPU; cupy is imported only when first asked for."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Optional

import numpy

from trdb.errors import NotSupportedError, OperationalError
from trdb.kernels import sparse
from trdb.kernels.backend import Backend


class CupyBackend(Backend):
    """Kernels on an NVIDIA GPU through CuPy; unavailable without cupy or without a device."""

    def __init__(self) -> None:
        super().__init__("cupy", self._import_cupy)
        self._available: Optional[bool] = None
        self._why_not = ""

    def is_available(self) -> bool:
        if self._available is None:
            self._available = self._probe()
        return self._available

    def unavailable_reason(self) -> str:
        """Why `is_available()` is false ('' when it is true)."""
        self.is_available()
        return self._why_not

    def _probe(self) -> bool:
        # Any failure here (no package, no driver, no device) means "not available", never a crash.
        try:
            cupy = importlib.import_module("cupy")
        except Exception as exc:  # noqa: BLE001
            self._why_not = f"cupy cannot be imported ({exc})"
            return False
        try:
            if not cupy.is_available():
                self._why_not = "cupy sees no CUDA device"
                return False
        except Exception as exc:  # noqa: BLE001
            self._why_not = f"cupy cannot reach a CUDA device ({exc})"
            return False
        return True

    def _import_cupy(self) -> ModuleType:
        if not self.is_available():
            raise NotSupportedError(f"the cupy backend is not available: {self._why_not}")
        return importlib.import_module("cupy")

    @property
    def on_host(self) -> bool:
        return False

    def device_memory(self) -> int:
        """The GPU's memory, or less where CuPy's memory pool is limited (CUPY_GPU_MEMORY_LIMIT)."""
        total = int(self.xp.cuda.Device().mem_info[1])
        pool_limit = int(self.xp.get_default_memory_pool().get_limit())
        return min(total, pool_limit) if pool_limit else total

    def writeable(self, array: Any) -> bool:
        return True  # CuPy has no read-only arrays: device tiles are copies no one else holds

    def to_numpy(self, array: Any) -> numpy.ndarray:
        if isinstance(array, numpy.ndarray):
            return array
        if sparse.is_sparse(array):
            return sparse.to_host(array).toarray()
        return self.xp.asnumpy(array)

    def sparse_tile(self, tile: Any) -> Any:
        # A scipy CSR tile moves to the device as cupyx's CSR (its three arrays copied once); cupyx
        # has float CSR only, so other dtypes go dense.
        if not isinstance(tile.data, numpy.ndarray):
            return tile
        if tile.dtype not in (numpy.float32, numpy.float64):
            return self.xp.asarray(tile.toarray())
        module = sparse.sparse_module(self.xp.zeros(0))
        return sparse.make_csr(self.xp.asarray(tile.data), self.xp.asarray(tile.indices),
                               self.xp.asarray(tile.indptr), tuple(tile.shape), module)


CUPY_BACKEND = CupyBackend()


def out_of_device_memory(exc: BaseException) -> Optional[OperationalError]:
    """The error a user gets for a GPU allocation that failed (CuPy's OutOfMemoryError, a cuBLAS or cuSPARSE
    workspace), or None for any other exception."""
    if not (type(exc).__module__ or "").startswith(("cupy", "cupy_backends")):
        return None
    if not (isinstance(exc, MemoryError) or "ALLOC_FAILED" in str(exc)):
        return None
    return OperationalError(f"out of GPU memory: {exc}",
                            hint="other processes on the GPU count too; SET gpu_memory_limit lower (what operators "
                                 "hold before they spill), or SET device = 'cpu'")
