"""SUM(MATMUL(a, b)): a product added straight into the group's sum (CSR a), or placed (dense).

A graph propagation `SUM(MATMUL(A.v, X.v)) ... GROUP BY A.i, X.j` would otherwise allocate a
zeroed product tile per joined pair, copy the first one and add the others in: for large CSR
tiles that is a fifth of the query. Any other pair (dense, other dtypes, a shape that does not
fit) runs the MATMUL kernel as usual and is added to the sum the usual way. (Dense tiles added inside
scipy's GEMM with beta = 1 were tried and were slower: scipy's OpenBLAS is not numpy's, and their thread
pools spin against each other; one thread per worker, 2048^2 in 512 tiles took 0.24 s against 0.145 s.)
Where the aggregate's groups are placed in the result's array (execution/placement.py), a group's first
dense product is computed into its place there.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from trdb.execution.compile import compile_expr
from trdb.execution.work import charge, counted, kernel_work
from trdb.kernels import functions as kernels
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse, matmul_add_into
from trdb.planner import expressions as bx

Feed = Callable[[object, tuple], None]  # (accumulator, row)


def product_sum_feed(function: str, arg: Optional[bx.Bound], backend: Backend, canvas=None) -> Optional[Feed]:
    """A feed for SUM over MATMUL on the numpy backend, or None for every other aggregate; `canvas`: the
    ResultCanvas the groups are placed in (their accumulators know their keys)."""
    if function != "SUM" or backend is not NUMPY_BACKEND or not isinstance(arg, bx.Call) \
            or arg.function.name != "MATMUL" or len(arg.args) != 2:
        return None
    left, right = (compile_expr(a, backend) for a in arg.args)
    function, xp = arg.function, backend.xp
    call = counted(function, lambda values: function.call(backend, values))

    def feed(accumulator, row: tuple) -> None:
        a, b = left(row), right(row)
        if is_sparse(a) and _accumulate(accumulator, a, b, xp, canvas):
            charge(*kernel_work(function, (a, b), accumulator.value))
            return
        if canvas is not None and accumulator.value is None and _placed(accumulator, a, b, canvas):
            charge(*kernel_work(function, (a, b), accumulator.value))
            return
        accumulator.add(call([a, b]), xp, owned=True)
    return feed


def _accumulate(accumulator, a, b, xp, canvas=None) -> bool:
    if accumulator.value is None:
        if getattr(b, "ndim", 0) != 2 or a.shape[1] != b.shape[0] or a.dtype != b.dtype:
            return False
        shape = (a.shape[0], b.shape[1])
        # the group's place in the result's array where it is one contiguous block (tiles as wide as the
        # result: scipy's kernel writes a C-ordered output), already zeroed; else a zeroed tile of its own
        placed = canvas.slot(accumulator.key, shape, a.dtype, contiguous=True) if canvas is not None else None
        target = placed if placed is not None else xp.zeros(shape, dtype=a.dtype)
        if not matmul_add_into(target, a, b):
            if placed is not None:
                canvas.forget(accumulator.key)  # its place stays zeros: the group goes the usual way
            return False
        _hold(accumulator, target)
    elif not matmul_add_into(accumulator.value, a, b):
        return False
    accumulator.count += 1
    return True


def _placed(accumulator, a, b, canvas) -> bool:
    """The group's first product computed into its place in the canvas (BLAS writes the strided view)."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2 \
            or a.shape[1] != b.shape[0] or a.dtype != b.dtype:
        return False
    target = canvas.slot(accumulator.key, (a.shape[0], b.shape[1]), a.dtype)
    if target is None:
        return False
    kernels.matmul(np, a, b, out=target)
    _hold(accumulator, target)
    accumulator.count += 1
    return True


def _hold(accumulator, target) -> None:
    """`target` becomes the group's sum; its bytes are what the group grew by."""
    accumulator.value = target
    if accumulator.growth is not None:
        accumulator.growth.bytes += target.nbytes
