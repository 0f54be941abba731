"""Opening a .npy file for CREATE TENSOR ... FROM 'file.npy': header checked against the file before any read.

The header's dtype and shape are read first, so that a file of Python objects is refused without
unpickling, a complex one before its values are touched, and a header that claims more bytes than
the file has is a DataError instead of a huge allocation. The values are then memory-mapped, so a
large file is read tile by tile as it is stored, never copied whole.
"""
from __future__ import annotations

import math
import os

import numpy as np

from trdb.errors import DataError, OperationalError
from trdb.storage import file_sandbox
from trdb.storage.database import Database

_VERSIONS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0,
             (3, 0): np.lib.format.read_array_header_2_0}  # 3.0 differs from 2.0 only in utf-8 field names


def load_npy(path: str, db: Database) -> np.ndarray:
    """The array in a .npy file, memory-mapped read-only (an empty array is read); the file is the one the path
    resolves to, after DuckDB's file access settings allow it."""
    path = file_sandbox.checked(db, path)
    shape, fortran, dtype, offset, size = _header(path)
    if dtype.hasobject:
        raise DataError(f"'{path}' holds Python objects (pickled data); trdb reads only numeric .npy files "
                        "and never unpickles")
    if any(n < 0 for n in shape):
        raise DataError(f"'{path}' is not a valid .npy file: its header gives the shape {shape}")
    check_storable(dtype, f"'{path}'", "save np.real(a) or np.abs(a) instead")
    needed = math.prod(shape) * dtype.itemsize
    if size - offset < needed:
        raise DataError(f"'{path}' is truncated: its header says {needed} bytes of {dtype} values "
                        f"(shape {shape}), the file has {size - offset} after its header")
    try:
        if needed == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")
    except (OSError, ValueError) as exc:
        raise OperationalError(f"cannot read '{path}': {exc}") from None


def check_storable(dtype: np.dtype, what: str, complex_hint: str) -> None:
    """Only booleans, integers and floats can be a tensor's values: anything else is a DataError."""
    if dtype.kind == "c":
        raise DataError(f"{what} holds complex numbers ({dtype}); trdb tensors hold real values",
                        hint=f"{complex_hint} (or store the real and imaginary parts as two tensors)")
    if dtype.kind not in "biuf":
        raise DataError(f"cannot store an array of dtype {dtype} as a tensor",
                        hint="tensors hold booleans, integers or floats")


def _header(path: str) -> tuple[tuple[int, ...], bool, np.dtype, int, int]:
    """(shape, Fortran order, dtype, where the values start, file size) from a .npy header."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                raise DataError(f"'{path}' is empty, not a .npy file")
            version = np.lib.format.read_magic(file)
            if version not in _VERSIONS:
                raise DataError(f"'{path}' is a .npy file of version {version[0]}.{version[1]}, "
                                "which trdb cannot read", hint="save it with numpy.save")
            shape, fortran, dtype = _VERSIONS[version](file)
            return tuple(shape), fortran, dtype, file.tell(), size
    except FileNotFoundError:
        raise OperationalError(f"cannot read '{path}': no such file",
                               hint=f"paths are relative to {os.getcwd()}") from None
    except IsADirectoryError:
        raise OperationalError(f"cannot read '{path}': it is a directory") from None
    except OSError as exc:
        raise OperationalError(f"cannot read '{path}': {exc}") from None
    except (ValueError, TypeError, SyntaxError) as exc:
        raise DataError(f"'{path}' is not a valid .npy file: {exc}") from None
