"""The numpy backend: the reference that every other backend is tested against."""
from __future__ import annotations

from typing import Any, ContextManager

import numpy

from trdb.kernels.backend import Backend
from trdb.kernels.sparse import dense


class NumpyBackend(Backend):
    """Kernels on the CPU through numpy (BLAS for MATMUL and EINSUM contractions)."""

    def __init__(self) -> None:
        super().__init__("numpy", lambda: numpy)

    def to_numpy(self, array: Any) -> numpy.ndarray:
        return numpy.asarray(dense(array))

    def errstate(self) -> ContextManager:
        return numpy.errstate(all="ignore")


NUMPY_BACKEND = NumpyBackend()
