"""KernelFunction: one per-tuple function or operator, checked statically and run per tile."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence

import numpy

from trdb.catalog.kernel_args import CONSTANT_TYPES, NOT_CONST, Arg, KernelSignatureError, describe_shapes, signature_error
from trdb.catalog.shape_rules import FlopRule, ShapeRule
from trdb.catalog.shape_rules import elementwise as elementwise_rule
from trdb.errors import DataError
from trdb.kernels.backend import Backend
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse
from trdb.kernels.sparse_functions import densified

# numpy reports a bad dtype as TypeError, a bad value as ValueError or OverflowError.
_KERNEL_FAILURES = (ArithmeticError, ValueError, TypeError)
_CACHE_LIMIT = 4096  # entries in each per-function cache (dtype probes, run-time shapes)
_SCALAR_PROBES = {"b": True, "i": 1, "u": 1, "f": 1.0, "c": 1j}


class KernelFunction:
    """A kernel with its arity, constant arguments, shape rule, dtype inference and FLOP estimate.

    `max_args` None means any number (EINSUM). `label` is how messages name it: the function name,
    or 'operator +' for an operator. `sparse` is the version that takes CSR tiles
    (kernels/sparse_functions.py); without one, CSR arguments are densified first. `dtype_rule` gives
    the result dtype from the Args where running the kernel on 1-element stand-ins cannot (RESHAPE).
    """

    def __init__(self, name: str, impl: Callable, min_args: int, max_args: Optional[int],
                 shape_rule: ShapeRule, flop_rule: FlopRule, *,
                 const_positions: Iterable[int] = (), label: Optional[str] = None,
                 sparse: Optional[Callable] = None, dtype_rule: Optional[Callable[[list], numpy.dtype]] = None):
        self.name = name
        self.label = label or name
        self.min_args = min_args
        self.max_args = max_args
        self.const_positions = frozenset(const_positions)
        self._impl = impl
        self._sparse_impl = sparse or densified(impl)
        self.keeps_sparse = sparse is not None  # CSR arguments cost their non-zeros, not their tiles
        self._shape_rule = shape_rule
        self.elementwise = shape_rule is elementwise_rule
        self._flop_rule = flop_rule
        self._dtype_rule = dtype_rule
        self._dtypes: dict = {}  # probe results: a kernel's dtype depends only on the key below
        self._shapes_seen: dict = {}  # run-time shape rule results by argument shapes and scalars

    def __repr__(self) -> str:
        return f"<KernelFunction {self.label}>"

    # ---- static ------------------------------------------------------------------------------

    def infer(self, args: Sequence[Arg]) -> Arg:
        """The result's shape, dtype (and value, when every argument is a constant scalar)."""
        args = list(args)
        self._check_arity(args)
        self._check_consts(args)
        shape = self._shape_rule(self.label, args)
        dtype = self._result_dtype(args)
        const = NOT_CONST
        if shape is None and all(a.is_scalar and a.is_const for a in args):
            const = self.call(NUMPY_BACKEND, [a.const for a in args])
        return Arg(shape, dtype, const)

    def flops(self, arg_shapes: Sequence) -> int:
        """Estimated floating point operations; entries are shapes, None (a scalar) or Args."""
        args = [a if isinstance(a, Arg) else Arg(None if a is None else tuple(a), None)
                for a in arg_shapes]
        return int(self._flop_rule(args))

    def _shapes(self, args: Sequence[Arg]) -> list:
        return [a.shape for i, a in enumerate(args) if i not in self.const_positions]

    def _check_arity(self, args: Sequence, error: Optional[type] = None) -> None:
        n, lo, hi = len(args), self.min_args, self.max_args
        if lo <= n and (hi is None or n <= hi):
            return
        if hi is None:
            expected = f"at least {lo}"
        elif lo == hi:
            expected = str(lo)
        else:
            expected = f"{lo} to {hi}"
        shapes = [getattr(a, "shape", None) for a in args]
        plural = "" if expected == "1" else "s"
        detail = f"expects {expected} argument{plural}, got {n} ({describe_shapes(shapes)})"
        if error is DataError:
            raise DataError(f"{self.label}: {detail}")
        raise signature_error(self.label, shapes, detail)

    def _check_consts(self, args: Sequence[Arg]) -> None:
        for i in sorted(self.const_positions):
            if i < len(args) and not args[i].is_const:
                shapes = self._shapes(args)
                got = "a tensor" if args[i].shape is not None else "a run-time value"
                raise signature_error(self.label, shapes, f"argument {i + 1} must be a constant, "
                                      f"got {got} ({describe_shapes(shapes)})")

    def _result_dtype(self, args: Sequence[Arg]) -> numpy.dtype:
        """Apply the kernel to 1-element stand-ins of the arguments: numpy's promotion decides."""
        if self._dtype_rule is not None:
            return numpy.dtype(self._dtype_rule(list(args)))
        key = tuple(_probe_key(a) for a in args)
        try:
            return self._dtypes[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable constant: probe without caching
            key = None
        probes = [_probe_value(a) for a in args]
        with numpy.errstate(all="ignore"):
            try:
                dtype = numpy.asarray(self._impl(numpy, *probes)).dtype
            except _KERNEL_FAILURES as exc:
                shapes = self._shapes(args)
                dtypes = ", ".join(_dtype_name(a) for i, a in enumerate(args)
                                   if i not in self.const_positions)
                raise signature_error(self.label, shapes, f"not supported for dtypes ({dtypes}) "
                                      f"with {describe_shapes(shapes)}: {exc}") from None
        if key is not None:
            if len(self._dtypes) >= _CACHE_LIMIT:
                self._dtypes.clear()  # literals are part of the key; never let them pile up
            self._dtypes[key] = dtype
        return dtype

    # ---- run time ----------------------------------------------------------------------------

    def _runtime_shape(self, shapes: list, values: list):
        """The shape rule on actual tiles, remembered per argument shapes and scalars (every tile of a
        query has one of a few shapes); DataError if they misfit."""
        key = _shape_key(shapes, values)
        if key is not None and key in self._shapes_seen:
            return self._shapes_seen[key]
        runtime = [Arg(s, None) if s is not None else Arg(None, None, v) for s, v in zip(shapes, values)]
        try:
            shape = self._shape_rule(self.label, runtime)
        except KernelSignatureError as exc:
            raise DataError(exc.message, hint=exc.hint) from None
        if key is not None:
            if len(self._shapes_seen) >= _CACHE_LIMIT:
                self._shapes_seen.clear()
            self._shapes_seen[key] = shape
        return shape

    def call(self, backend: Backend, args: Sequence[Any]) -> Any:
        """Run on tiles (backend arrays) and Python scalars; DataError if the shapes misfit."""
        if backend is NUMPY_BACKEND:
            # dense numpy tiles (and Python numbers) of shapes and values seen before: checked then
            key = _seen_key(args)
            if key is not None and self._shapes_seen.get(key) is not None:
                return _as_tile(NUMPY_BACKEND, self._run(NUMPY_BACKEND, self._impl, args))
        values = [v.item() if isinstance(v, numpy.generic) else v for v in args]
        self._check_arity(values, DataError)
        if any(v is None for v in values):
            raise DataError(f"{self.label}: an operand is NULL", hint="a SUM, MIN or MAX of numbers over no tuples "
                                                                      "is NULL; tensors are never NULL")
        shapes = [getattr(v, "shape", None) for v in values]
        shape = self._runtime_shape(shapes, values)
        # Pure scalar arithmetic (keys, literals) is done on the host whatever the backend.
        run_on = backend if any(s is not None for s in shapes) else NUMPY_BACKEND
        impl = self._sparse_impl if any(is_sparse(v) for v in values) else self._impl
        out = self._run(run_on, impl, values)
        if shape is None:
            return out.item() if hasattr(out, "item") else out
        return _as_tile(backend, out)

    def _run(self, backend: Backend, impl: Callable, values: Sequence[Any]) -> Any:
        """`impl` on the values; its failures are a DataError naming the shapes."""
        with backend.errstate():
            try:
                return impl(backend.xp, *values)
            except _KERNEL_FAILURES as exc:
                tensor_shapes = [getattr(v, "shape", None) for i, v in enumerate(values)
                                 if i not in self.const_positions]
                raise DataError(f"{self.label}: {exc} ({describe_shapes(tensor_shapes)})") from exc


def _as_tile(backend: Backend, out: Any) -> Any:
    if not isinstance(out, backend.xp.ndarray) and not is_sparse(out):
        return backend.asarray(out)  # numpy returns 0-d results as numpy scalars
    return out


def _seen_key(args: Sequence[Any]) -> Optional[tuple]:
    """`_shape_key` of arguments that are dense numpy tiles, Python numbers and strings (an EINSUM's spec),
    at least one tile (the usual call: `v * 2`), without the general path's checks; None for any other
    arguments."""
    key = tuple(v.shape if type(v) is numpy.ndarray else (type(v), v) if type(v) in CONSTANT_TYPES else None
                for v in args)
    if None in key or all(type(v) is not numpy.ndarray for v in args):
        return None
    return key


def _shape_key(shapes: list, values: list) -> Optional[tuple]:
    key = tuple(s if s is not None else (type(v), v) for s, v in zip(shapes, values))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _probe_key(arg: Arg) -> tuple:
    ndim = None if arg.shape is None else len(arg.shape)
    dtype = None if arg.dtype is None else numpy.dtype(arg.dtype).str
    return (ndim, dtype, arg.const)


def _probe_value(arg: Arg) -> Any:
    if arg.shape is not None:
        dtype = numpy.float32 if arg.dtype is None else arg.dtype
        return numpy.ones((1,) * len(arg.shape), dtype=dtype)
    if arg.is_const:
        return arg.const
    kind = "i" if arg.dtype is None else numpy.dtype(arg.dtype).kind
    return _SCALAR_PROBES.get(kind, 1)


def _dtype_name(arg: Arg) -> str:
    if arg.dtype is not None:
        name = numpy.dtype(arg.dtype).name
        return name if arg.shape is not None else f"scalar {name}"
    if arg.shape is not None:
        return "float32"
    return f"scalar {type(arg.const).__name__}" if arg.is_const else "scalar int64"
