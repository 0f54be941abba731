"""A projection's product computed straight into its place in the result's array (execution/result_canvas.py).

The root of an EINSUM whose summed letters lie whole in one tile is a projection of the output keys and
one product per tuple, `EINSUM('ij,jl->il', ...)` or `MATMUL(...)`. Where the executor gave that
projection the result's canvas, each dense product is computed by BLAS into the tile's place (the
operands as transposed views where the spec asks), so that fetch_tensor() copies nothing. A tuple
whose product does not fit a place (another dtype, an edge tile of another shape, a key seen twice)
runs the kernel as usual and keeps a tile of its own.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from trdb.execution.result_canvas import ResultCanvas, product_call
from trdb.execution.tile_math.compile import ProductOperands, compile_expr, kernel_call, transposed_view_product
from trdb.execution.work import charge, kernel_work
from trdb.kernels import functions as kernels
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.plan import expressions as bx

Row = tuple


def placing_projection(exprs: tuple[bx.Bound, ...], canvas: ResultCanvas,
                       backend: Backend) -> Optional[Callable[[Row], Row]]:
    """A function from an input row to the output row that places its product, or None when the
    projection is not the keys and one product (then it runs as usual)."""
    product = product_call(exprs[-1])
    if product is None or backend is not NUMPY_BACKEND:
        return None
    spec, left, right = product
    keys = [compile_expr(e, backend) for e in exprs[:-1]]
    operands = ProductOperands(left, right, backend, transposable=spec is None)  # spec None: a MATMUL
    function = exprs[-1].function
    usual, view = kernel_call(exprs[-1], backend), transposed_view_product(function)
    const = () if spec is None else (spec,)

    def project(row: Row) -> Row:
        key = tuple(f(row) for f in keys)
        a, b, transposed = operands(row)
        if transposed:  # a CSR tile's transposed product: scipy's, nothing to place
            return (*key, view([a, b]))
        matrices = product_matrices(spec, a, b)
        target = None if matrices is None else canvas.slot(key, (matrices[0].shape[0], matrices[1].shape[1]), a.dtype)
        if target is None:
            return (*key, usual([*const, a, b]))  # the operands computed once
        kernels.matmul(np, *matrices, out=target)
        charge(*kernel_work(function, (a, b) if spec is None else (spec, a, b), target))
        return (*key, target)
    return project


def product_matrices(spec: Optional[str], a, b) -> Optional[tuple]:
    """The two matrices whose product is MATMUL(a, b) (`spec` None) or EINSUM(spec, a, b), when both are
    dense numpy tiles of one dtype that fit each other and the EINSUM is a matrix product."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != b.dtype:
        return None
    if spec is None:
        return (a, b) if a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0] else None
    matrices = kernels.product_operands(spec, a, b)
    if matrices is None or matrices[0].shape[1] != matrices[1].shape[0]:
        return None
    return matrices
