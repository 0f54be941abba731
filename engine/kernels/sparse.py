"""CSR tiles: recognizing them, choosing dense or CSR by density, and converting between the two.

A sparse tile is a 2-d `scipy.sparse.csr_array` on the CPU (`*` is elementwise, `@` is matmul, as
for numpy arrays) or a `cupyx.scipy.sparse.csr_matrix` on a GPU; code here and in the sparse
kernels only uses what both offer (`.multiply`, `@`, `.data/.indices/.indptr`, `.toarray()`).
A 2-d tile whose share of non-zeros is at most `CSR_MAX_DENSITY` (the cost model's threshold) is
stored and computed as CSR; every other tile is a dense array. CSR tiles here are canonical:
sorted column indices, no duplicates; explicit zeros may occur in computed tiles but never in
stored ones.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse

from trdb.config.unit_costs import CSR_MAX_DENSITY

try:  # scipy's own CSR (and CSC) x dense kernels, which add into their output (what `@` calls after zeroing one)
    from scipy.sparse._sparsetools import csc_matvecs as _transposed_matvecs
    from scipy.sparse._sparsetools import csr_matvecs as _matvecs
except ImportError:  # a scipy that moved them: SUM(MATMUL) then runs product by product
    _matvecs = _transposed_matvecs = None


_PLAIN = frozenset({np.ndarray, int, float, bool, type(None), np.float32, np.float64, np.int64})  # asked most


def is_sparse(tile: Any) -> bool:
    """Whether `tile` is a sparse tile (CSR; any scipy/cupyx sparse format) rather than a dense array or a scalar."""
    return type(tile) not in _PLAIN and not isinstance(tile, np.ndarray) and hasattr(tile, "tocsr")


def elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def wants_csr(shape: tuple[int, ...], nonzeros: int, dtype: Any = np.float32) -> bool:
    """The format rule: 2-d tiles with at most CSR_MAX_DENSITY non-zeros are CSR (float16 never:
    scipy.sparse has no float16)."""
    return len(shape) == 2 and nonzeros <= CSR_MAX_DENSITY * elements(shape) and np.dtype(dtype) != np.float16


def dense(tile: Any) -> Any:
    """`tile` as a dense array of its backend (CSR tiles are expanded; anything else is returned)."""
    return tile.toarray() if is_sparse(tile) else tile


ZERO_COUNT_CHUNK = 1 << 20  # elements compared with 0 at a time (a bounded temporary of bools)


def count_nonzero(tile: Any) -> int:
    """A tile's non-zeros. A contiguous float tile's are its size less its zeros (compared with 0 a chunk at a
    time): numpy's count_nonzero of floats takes ~6x as long (a 512 x 512 float32 tile: 0.18 against 0.03 ms).
    The same count: NaN is not zero, -0.0 is."""
    if is_sparse(tile):
        return int(tile.count_nonzero())
    if type(tile) is np.ndarray and tile.dtype.kind in "fc" and tile.flags.c_contiguous:
        flat = tile.reshape(-1)
        return flat.size - sum(int(np.count_nonzero(flat[start:start + ZERO_COUNT_CHUNK] == 0))
                               for start in range(0, flat.size, ZERO_COUNT_CHUNK))
    return int(np.count_nonzero(tile))


def nbytes(tile: Any) -> int:
    """Memory held by a tile (its three arrays for CSR)."""
    if type(tile) is np.ndarray:
        return tile.nbytes
    if is_sparse(tile):
        return int(tile.data.nbytes + tile.indices.nbytes + tile.indptr.nbytes)
    return int(getattr(tile, "nbytes", 0))


def make_csr(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int],
             module: Any = scipy.sparse) -> Any:
    """A canonical CSR tile over these arrays (no copy; they must be in canonical order)."""
    if module is scipy.sparse:
        tile = scipy.sparse.csr_array((data, indices, indptr), shape=shape, copy=False)
    else:
        tile = module.csr_matrix((data, indices, indptr), shape=shape)
    _mark_canonical(tile)  # read-only arrays from storage must never be sorted in place
    return tile


def empty_csr(shape: tuple[int, int], dtype: Any, like: Any = None) -> Any:
    """An all-zero CSR tile (no stored values)."""
    xp = np if like is None or isinstance(like.data, np.ndarray) else _array_module(like)
    return make_csr(xp.zeros(0, dtype=dtype), xp.zeros(0, dtype=np.int32), xp.zeros(shape[0] + 1, dtype=np.int32),
                    shape, sparse_module(like))


def to_csr(tile: Any) -> Any:
    """A canonical CSR tile holding `tile` (a 2-d dense array or any sparse tile); explicit zeros dropped."""
    if is_sparse(tile):
        if tile.format != "csr":
            tile = tile.tocsr()
        if tile.has_canonical_format and int(tile.count_nonzero()) == tile.nnz:
            return tile
        tile = tile.copy()  # never sort or prune a shared tile in place
        tile.sum_duplicates()
        tile.eliminate_zeros()
        return tile
    module = scipy.sparse if isinstance(tile, np.ndarray) else _cupy_sparse()
    out = module.csr_array(tile) if module is scipy.sparse else module.csr_matrix(tile)
    _mark_canonical(out)
    return out


def stored_form(tile: Any) -> tuple[Any, int]:
    """(`tile` in the format the density rule picks, its non-zeros): canonical CSR without explicit
    zeros when 2-d and sparse enough, else dense. `tile` is on the host."""
    if is_sparse(tile):
        tile = to_csr(tile)
        nonzeros = tile.nnz
        return (tile if wants_csr(tuple(tile.shape), nonzeros, tile.dtype) else tile.toarray()), nonzeros
    nonzeros = count_nonzero(tile)
    csr = nonzeros and wants_csr(tuple(tile.shape), nonzeros, tile.dtype)
    return (to_csr(tile) if csr else tile), nonzeros


def settle(tile: Any) -> Any:
    """A computed CSR tile that has filled in beyond the threshold becomes dense; others are unchanged."""
    if is_sparse(tile) and not wants_csr(tuple(tile.shape), tile.nnz, tile.dtype):
        return tile.toarray()
    return tile


def row_indices(tile: Any) -> Any:
    """The row of each stored value of a CSR tile (expands indptr)."""
    xp = _array_module(tile)
    counts = xp.diff(tile.indptr)
    return xp.repeat(xp.arange(tile.shape[0], dtype=tile.indices.dtype), counts)


def add_into(target: Any, tile: Any) -> Any:
    """target += tile, in place, for a dense writable target and a CSR tile of its shape."""
    if tile.nnz:
        target[row_indices(tile), tile.indices] += tile.data
    return target


def scatter_into(target: Any, tile: Any) -> None:
    """Write a CSR tile into a zeroed dense target of its shape (a view is fine)."""
    if tile.nnz:
        target[row_indices(tile), tile.indices] = tile.data


def matmul_add_into(target: Any, a: Any, b: Any, transposed: bool = False) -> bool:
    """target += a @ b for a scipy CSR `a` and a dense C-ordered `b` of one float dtype, without a product
    tile (scipy's CSR x dense kernel accumulates into its output); False, doing nothing, where it cannot.
    `transposed`: target += aᵀ @ b, by scipy's CSC kernel on a's own arrays (a CSR tile's arrays are its
    transpose's in CSC), with no transposed copy of `a` made (a graph convolution's gradient Âᵀ·G)."""
    if _matvecs is None or not (is_sparse(a) and isinstance(b, np.ndarray) and isinstance(target, np.ndarray)):
        return False
    rows, inner = (a.shape[1], a.shape[0]) if transposed else a.shape
    if a.format != "csr" or not isinstance(a.data, np.ndarray) or b.ndim != 2 or inner != b.shape[0]:
        return False
    if not (a.dtype == b.dtype == target.dtype and a.dtype.kind == "f" and a.indices.dtype == a.indptr.dtype):
        return False
    if target.shape != (rows, b.shape[1]) or not (target.flags.c_contiguous and target.flags.writeable):
        return False
    kernel = _transposed_matvecs if transposed else _matvecs
    kernel(rows, inner, b.shape[1], a.indptr, a.indices, a.data, np.ascontiguousarray(b).ravel(), target.ravel())
    return True


def sparse_module(tile: Any = None) -> Any:
    """scipy.sparse for CPU tiles (and when no tile is given), cupyx.scipy.sparse for GPU tiles."""
    if tile is None or isinstance(getattr(tile, "data", None), np.ndarray) or isinstance(tile, np.ndarray):
        return scipy.sparse
    return _cupy_sparse()


def to_host(tile: Any) -> Any:
    """A CSR tile on the host (scipy), as fetch_sparse and storage need it; dense tiles are unchanged."""
    if is_sparse(tile) and not isinstance(tile.data, np.ndarray):
        return make_csr(tile.data.get(), tile.indices.get(), tile.indptr.get(), tuple(tile.shape))
    return tile


def _mark_canonical(tile: Any) -> None:
    try:
        tile.has_canonical_format = True
    except AttributeError:  # a sparse library that computes the flag itself
        pass


def _array_module(tile: Any) -> Any:
    if isinstance(getattr(tile, "data", None), np.ndarray) or isinstance(tile, np.ndarray):
        return np
    import cupy  # only reached with GPU tiles, so cupy is there

    return cupy


def _cupy_sparse() -> Any:
    import cupyx.scipy.sparse  # only reached with GPU tiles

    return cupyx.scipy.sparse
