"""The backend interface: one array module (numpy or cupy) behind a small common surface."""
from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, Callable, ContextManager, Optional

import numpy

from trdb.kernels import sparse


class Backend:
    """An array backend: kernels receive `backend.xp` and call only array-API style functions on it.

    The array module is loaded on first use, so a backend whose library is missing (cupy on a
    machine without a GPU) can still be named, listed and asked `is_available()`.
    """

    def __init__(self, name: str, load: Callable[[], ModuleType]):
        self.name = name
        self._load = load
        self._xp: Optional[ModuleType] = None

    @property
    def xp(self) -> ModuleType:
        """The array module (numpy or cupy)."""
        if self._xp is None:
            self._xp = self._load()
        return self._xp

    def is_available(self) -> bool:
        """Whether this backend can run kernels on this machine."""
        return True

    @property
    def on_host(self) -> bool:
        """Whether its arrays live in host memory (so they count against memory_limit)."""
        return True

    def device_memory(self) -> int:
        """The total memory of the device its arrays live on (a host backend: 0)."""
        return 0

    def asarray(self, value: Any, dtype: Any = None) -> Any:
        """`value` as an array of this backend (no copy when it already is one of that dtype);
        a CSR tile stays a CSR tile (of this backend's sparse module)."""
        if sparse.is_sparse(value):
            return self.sparse_tile(value if dtype is None or value.dtype == dtype else value.astype(dtype))
        return self.xp.asarray(value, dtype=dtype)

    def sparse_tile(self, tile: Any) -> Any:
        """A CSR tile on this backend (the numpy backend keeps scipy's)."""
        return tile

    def to_numpy(self, array: Any) -> numpy.ndarray:
        """A numpy array holding the values of `array` (device memory is copied to the host; CSR expanded)."""
        return numpy.asarray(sparse.dense(array))

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A zero tile: what an absent tuple stands for."""
        return self.xp.zeros(shape, dtype=dtype)

    def writeable(self, array: Any) -> bool:
        """Whether `array` may be written in place (numpy marks shared tiles read-only)."""
        return bool(array.flags.writeable)

    def errstate(self) -> ContextManager:
        """A context in which invalid or overflowing arithmetic yields inf/nan without warnings.

        SQL users see LOG(0) = -inf in their results; a RuntimeWarning per tile would only be noise.
        """
        return contextlib.nullcontext()

    def __repr__(self) -> str:
        return f"<Backend {self.name}>"


def to_host(value: Any, keep_sparse: bool = False) -> Any:
    """A value as a user receives it: keys as int, tiles as numpy arrays (device arrays copied back);
    CSR tiles become dense arrays, or scipy CSR tiles with `keep_sparse`."""
    if value is None or isinstance(value, (int, float, str, bool, numpy.ndarray)):
        return value
    if sparse.is_sparse(value):
        value = sparse.to_host(value)
        return value if keep_sparse else value.toarray()
    if isinstance(value, numpy.generic):
        return numpy.asarray(value)
    if hasattr(value, "get") and not isinstance(value, dict):  # a CuPy array (a dict: a DuckDB STRUCT or MAP)
        return value.get()
    return value
