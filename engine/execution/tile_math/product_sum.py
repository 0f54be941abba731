"""SUM(MATMUL(a, b)): a product added straight into the group's sum (CSR a), or placed (dense, also EINSUM).

A graph propagation `SUM(MATMUL(A.v, X.v)) ... GROUP BY A.i, X.j` would otherwise allocate a
zeroed product tile per joined pair, copy the first one and add the others in: for large CSR
tiles that is a fifth of the query. A gradient's `SUM(MATMUL(TRANSPOSE(A.v), G.v))` of a CSR A adds Aᵀ·G in by
scipy's CSC kernel on A's own arrays, without a transposed copy of A (Cora's Âᵀ·G: 0.19 against 0.35 ms).
Any other pair (dense, other dtypes, a shape that does not fit) runs the MATMUL kernel as usual and is
added to the sum the usual way. (Dense tiles added inside
scipy's GEMM with beta = 1 were tried and were slower: scipy's OpenBLAS is not numpy's, and their thread
pools spin against each other; one thread per worker, 2048^2 in 512 tiles took 0.24 s against 0.145 s.)
Where the aggregate's groups are placed in the result's array (execution/result_canvas.py), a group's first
dense product (of MATMUL, or of a two-operand EINSUM that is a matrix product) is computed into its place there.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from trdb.execution.result_canvas import product_call
from trdb.execution.tile_math.compile import ProductOperands
from trdb.execution.tile_math.placed_product import product_matrices
from trdb.execution.tile_math.product_sharing import MIN_SHARED_FLOPS, GroupOrder, SharedProducts
from trdb.execution.work import charge, counted, kernel_work
from trdb.kernels import functions as kernels
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse, matmul_add_into
from trdb.plan import expressions as bx

Feed = Callable[[object, tuple], None]  # (accumulator, row)


def product_sum_feed(function: str, arg: Optional[bx.Bound], backend: Backend, canvas=None,
                     shared: Optional[SharedProducts] = None) -> Optional[Feed]:
    """A feed for SUM over MATMUL on the numpy backend (and over a two-operand EINSUM where groups are
    placed), or None for every other aggregate; `canvas`: the ResultCanvas the groups are placed in (their
    accumulators know their keys); `shared`: the instance's part of the products its siblings may compute
    (tile_math/product_sharing.py), which takes its dense matrix products of MIN_SHARED_FLOPS or more."""
    product = product_call(arg) if function == "SUM" and backend is NUMPY_BACKEND else None
    if product is None or (product[0] is not None and canvas is None):
        return None
    spec = product[0]
    operands = ProductOperands(product[1], product[2], backend, transposable=spec is None)  # spec None: a MATMUL
    function, xp, const = arg.function, backend.xp, () if product[0] is None else (product[0],)
    call = counted(function, lambda values: function.call(backend, values))

    def feed(accumulator, row: tuple) -> None:
        a, b, transposed = operands(row)
        if shared is not None:
            if spec is None and _shareable(a, b):
                order = accumulator.order or _ordered(accumulator)
                shared.submit(order, lambda: call([a, b]), lambda product: _add(accumulator, product, xp, canvas))
                return
            shared.settle(accumulator.order)  # added to directly: after the group's queued products
        if transposed:  # MATMUL(TRANSPOSE(a), b) of a CSR a: aᵀ·b added in by scipy's CSC kernel, a not transposed
            if _accumulate(accumulator, a, b, xp, canvas, transposed=True):
                charge(*kernel_work(function, (a, b), accumulator.value))
                return
            a = operands.transposed(a)
        if spec is None and is_sparse(a) and _accumulate(accumulator, a, b, xp, canvas):
            charge(*kernel_work(function, (a, b), accumulator.value))
            return
        if canvas is not None and accumulator.value is None and _placed(accumulator, spec, a, b, canvas):
            charge(*kernel_work(function, (*const, a, b), accumulator.value))
            return
        accumulator.add(call([*const, a, b]), xp, owned=True)
    return feed


def _shareable(a, b) -> bool:
    """Whether a MATMUL of `a` and `b` is dense matrices on the host, large enough to be worth queueing."""
    return (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
            and 2 * a.size * b.shape[1] >= MIN_SHARED_FLOPS)


def _add(accumulator, product, xp, canvas) -> None:
    """A computed product added to its group's sum; a placed group's first one is copied into its place."""
    if canvas is not None and accumulator.value is None:
        target = canvas.slot(accumulator.key, product.shape, product.dtype)
        if target is not None:
            target[...] = product
            _hold(accumulator, target)
            accumulator.count += 1
            return
    accumulator.add(product, xp, owned=True)


def _ordered(accumulator) -> GroupOrder:
    accumulator.order = GroupOrder()
    return accumulator.order


def _accumulate(accumulator, a, b, xp, canvas=None, transposed: bool = False) -> bool:
    """a @ b (`transposed`: aᵀ @ b) of a CSR `a` added into the group's sum by scipy's kernel; False where it
    cannot be."""
    rows, inner = (a.shape[1], a.shape[0]) if transposed else a.shape
    if accumulator.value is None:
        if getattr(b, "ndim", 0) != 2 or inner != b.shape[0] or a.dtype != b.dtype:
            return False
        shape = (rows, b.shape[1])
        # the group's place in the result's array where it is one contiguous block (tiles as wide as the
        # result: scipy's kernel writes a C-ordered output), zeroed; else a zeroed tile of its own
        placed = canvas.slot(accumulator.key, shape, a.dtype, contiguous=True, zeroed=True) \
            if canvas is not None else None
        target = placed if placed is not None else xp.zeros(shape, dtype=a.dtype)
        if not matmul_add_into(target, a, b, transposed):
            if placed is not None:
                canvas.forget(accumulator.key)  # its place stays zeros: the group goes the usual way
            return False
        _hold(accumulator, target)
    elif not matmul_add_into(accumulator.value, a, b, transposed):
        return False
    accumulator.count += 1
    return True


def _placed(accumulator, spec: Optional[str], a, b, canvas) -> bool:
    """The group's first product computed into its place in the canvas (BLAS writes the strided view)."""
    matrices = product_matrices(spec, a, b)
    if matrices is None:
        return False
    target = canvas.slot(accumulator.key, (matrices[0].shape[0], matrices[1].shape[1]), a.dtype)
    if target is None:
        return False
    kernels.matmul(np, *matrices, out=target)
    _hold(accumulator, target)
    accumulator.count += 1
    return True


def _hold(accumulator, target) -> None:
    """`target` becomes the group's sum; its bytes are what the group grew by."""
    accumulator.value = target
    if accumulator.growth is not None:
        accumulator.growth.bytes += target.nbytes
