"""Executed work: the FLOPs and bytes of every kernel call, charged to the operator running it.

EXPLAIN ANALYZE reports them per operator and for the statement. FLOPs come from the kernel's own
FLOP rule (the one the cost model estimates with: 2*m*n*k for a matrix product, one per element
for an elementwise kernel, the tile's elements for a sum of tiles), applied to the shapes the
kernel actually received; bytes are those a kernel reads and writes (its array arguments and its
result). A CSR argument counts its stored entries: a sparse product 2*nnz*n, bytes its data and
indices. The operator whose `next_batch` runs on this thread is charged (a thread-local stack: a
parent's call into its child charges the child while it runs).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np

from trdb.catalog.kernel_args import CONSTANT_TYPES, Arg
from trdb.kernels.sparse import is_sparse, nbytes

_local = threading.local()
_FLOPS_SEEN: dict = {}   # (function name, argument shapes and scalars) -> FLOPs: tiles repeat a few shapes
_CACHE_LIMIT = 4096


class Work:
    """FLOPs and bytes counted for one operator (or any other scope that `charging` opens)."""

    __slots__ = ("flops", "bytes")

    def __init__(self) -> None:
        self.flops = 0
        self.bytes = 0


def current() -> Optional[Work]:
    return getattr(_local, "work", None)


def swap(work: Optional[Work]) -> Optional[Work]:
    """Make `work` the one charged on this thread; returns the one it replaces (to be swapped back)."""
    previous = getattr(_local, "work", None)
    _local.work = work
    return previous


def charge(flops: int, moved: int) -> None:
    work = getattr(_local, "work", None)
    if work is not None:
        work.flops += flops
        work.bytes += moved


def charge_add(value: Any) -> None:
    """One tile added into an accumulator: one FLOP per element, read twice and written once."""
    size = getattr(value, "nnz", None) if is_sparse(value) else getattr(value, "size", None)
    if size:
        charge(int(size), 3 * nbytes(value))


def counted(function: Any, call: Callable[[Sequence[Any]], Any]) -> Callable[[Sequence[Any]], Any]:
    """`call(args)` of the KernelFunction `function`, charging its FLOPs and bytes to this thread's operator."""
    def run(args: Sequence[Any]) -> Any:
        out = call(args)
        work = getattr(_local, "work", None)
        if work is not None:
            flops, moved = kernel_work(function, args, out)
            work.flops += flops
            work.bytes += moved
        return out
    return run


def kernel_work(function: Any, args: Sequence[Any], out: Any) -> tuple[int, int]:
    """(FLOPs, bytes) of one call of `function` on `args` that gave `out`."""
    if type(out) is np.ndarray and all(type(a) is np.ndarray or type(a) in CONSTANT_TYPES for a in args):
        # dense tiles and constants (`v * 2`, an EINSUM spec): the usual case
        flops = _FLOPS_SEEN.get((function.name, tuple(a.shape if type(a) is np.ndarray else a for a in args)))
        if flops is not None:
            return flops, sum(a.nbytes for a in args if type(a) is np.ndarray) + out.nbytes
    moved = sum(nbytes(a) for a in args if hasattr(a, "shape")) + (nbytes(out) if hasattr(out, "shape") else 0)
    if function.name == "MATMUL" and is_sparse(args[0]) and len(getattr(args[1], "shape", ())) == 2:
        return 2 * args[0].nnz * args[1].shape[1], moved
    key = (function.name, tuple(a.shape if hasattr(a, "shape") else a for a in args))
    try:
        return _FLOPS_SEEN[key], moved
    except KeyError:
        pass
    except TypeError:  # an unhashable constant argument: count without remembering
        key = None
    flops = function.flops([Arg(tuple(a.shape), None) if hasattr(a, "shape") else Arg(None, None, a) for a in args])
    if key is not None:
        if len(_FLOPS_SEEN) >= _CACHE_LIMIT:
            _FLOPS_SEEN.clear()
        _FLOPS_SEEN[key] = flops
    return flops, moved
