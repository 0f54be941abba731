"""What `CREATE TENSOR ... FROM ?` accepts: numpy, scipy.sparse, pandas, pyarrow, and anything with __array__ or DLPack."""
from __future__ import annotations

from typing import Any

import numpy as np

from trdb.errors import ProgrammingError
from trdb.kernels.sparse_input import checked_sparse


def is_sparse_matrix(value: Any) -> bool:
    return hasattr(type(value), "tocoo") and hasattr(type(value), "nnz")  # the class: nnz of a broken matrix raises


def array_from_param(value: Any) -> Any:
    """A numpy array (a memmap stays one, read in pieces later), or a 2-d scipy.sparse matrix (kept sparse)."""
    if isinstance(value, np.ndarray):
        return value
    if is_sparse_matrix(value):
        value = checked_sparse(value, "the scipy.sparse matrix given for ?")
        if value.ndim != 2:
            raise ProgrammingError(f"CREATE TENSOR ... FROM ? takes 2-d scipy.sparse arrays, got {value.ndim}-d")
        return value
    module, kind = type(value).__module__, type(value).__name__
    if module.startswith("pyarrow"):
        return _from_arrow(value, kind)
    if module.startswith(("pandas", "polars")) and hasattr(value, "to_numpy"):
        return _numeric(value.to_numpy(), kind)  # a DataFrame: one column per column of the matrix
    if hasattr(value, "__dlpack__"):
        return _from_dlpack(value)
    if hasattr(value, "__array__"):
        return np.asarray(value)
    raise ProgrammingError(f"CREATE TENSOR ... FROM ? takes a numpy array, a scipy.sparse matrix, a pandas "
                           f"DataFrame, a pyarrow Table or Tensor, or anything with __array__ or __dlpack__; "
                           f"got {type(value).__name__}")


def _from_arrow(value: Any, kind: str) -> np.ndarray:
    if kind == "Tensor":
        return value.to_numpy()
    if kind in ("Table", "RecordBatch"):
        columns = [_numeric(column.to_numpy(), f"column {name!r}") for name, column in
                   zip(value.column_names, value.columns)]
        return np.column_stack(columns) if columns else np.empty((value.num_rows, 0))
    if kind in ("Array", "ChunkedArray") or hasattr(value, "to_numpy"):
        return _numeric(value.to_numpy(), kind)
    raise ProgrammingError(f"CREATE TENSOR ... FROM ? cannot read a pyarrow {kind}")


def _numeric(array: np.ndarray, what: str) -> np.ndarray:
    if array.dtype == object:
        raise ProgrammingError(f"CREATE TENSOR ... FROM ?: the {what} holds values that are not numbers "
                               "(or holds NULLs)", hint="select its numeric columns and fill missing values first")
    return array


def _from_dlpack(value: Any) -> np.ndarray:
    """A CPU DLPack tensor without a copy; a device tensor through its own copy to the host."""
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        for to_host in ("get", "cpu"):  # CuPy: .get(); torch: .cpu()
            if hasattr(value, to_host):
                host = getattr(value, to_host)()
                return np.from_dlpack(host) if hasattr(host, "__dlpack__") else np.asarray(host)
        if hasattr(value, "__array__"):
            return np.asarray(value)
        raise ProgrammingError(f"CREATE TENSOR ... FROM ?: cannot read the {type(value).__name__} through "
                               f"DLPack: {exc}", hint="pass a tensor on the CPU") from None
