"""Device placement: which kernel backend the `device` setting selects."""
from __future__ import annotations

from trdb.errors import OperationalError
from trdb.kernels.backend import Backend
from trdb.kernels.cupy_backend import CUPY_BACKEND
from trdb.kernels.numpy_backend import NUMPY_BACKEND


def backend_for(device: str) -> Backend:
    """'cpu': numpy; 'gpu': CuPy, or an error saying why there is none; 'auto': CuPy when it sees a GPU."""
    if device == "cpu":
        return NUMPY_BACKEND
    if CUPY_BACKEND.is_available():
        return CUPY_BACKEND
    if device == "gpu":
        raise OperationalError(f"device 'gpu' is not available: {CUPY_BACKEND.unavailable_reason()}",
                               hint="SET device = 'cpu' (or 'auto' to use a GPU when there is one)")
    return NUMPY_BACKEND
