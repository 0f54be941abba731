"""What the binder knows of a kernel argument (shape, dtype, constant) and the static error."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy


class _NotConst:
    """The type of NOT_CONST: a value known only at run time."""

    _instance: Optional["_NotConst"] = None

    def __new__(cls) -> "_NotConst":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_CONST"

    def __reduce__(self) -> str:
        return "NOT_CONST"


NOT_CONST = _NotConst()
# the Python types of a call's arguments beside its tiles (numbers, an EINSUM's spec), which the fast paths of
# the shape check (kernel_function.py) and of the work count (execution/work.py) key by value
CONSTANT_TYPES = (int, float, bool, str)


@dataclass(frozen=True)
class Arg:
    """One argument of a kernel call, as far as it is known before running.

    shape None is a Python scalar (a key or a literal), weak for dtype promotion; `()` is a 0-d
    tensor. A scalar's dtype only gives its kind (bool, int64 or float64); a scalar without dtype
    takes its kind from `const`, or is an int64 (a key). A tensor without dtype is float32.
    """

    shape: tuple[int, ...] | None
    dtype: numpy.dtype | None
    const: object = NOT_CONST

    @property
    def is_scalar(self) -> bool:
        return self.shape is None

    @property
    def is_const(self) -> bool:
        return self.const is not NOT_CONST


class KernelSignatureError(Exception):
    """A static type or shape error of a kernel call; the message names function and shapes."""

    def __init__(self, message: str, *, function: str = "", shapes: Sequence = (), hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.function = function
        self.shapes = tuple(shapes)


def format_shape(shape: tuple[int, ...] | None) -> str:
    """'(4, 3)', '(3,)', '()' or 'scalar'."""
    return "scalar" if shape is None else str(tuple(shape))


def describe_shapes(shapes: Sequence[tuple[int, ...] | None]) -> str:
    """'shape (4, 3)', 'shapes (4, 3) and (5, 3)', 'shapes (1,), (2,) and scalar'."""
    texts = [format_shape(s) for s in shapes]
    if not texts:
        return "no arguments"
    if len(texts) == 1:
        return f"shape {texts[0]}"
    return "shapes " + ", ".join(texts[:-1]) + " and " + texts[-1]


def signature_error(label: str, shapes: Sequence, detail: str, hint: str | None = None) -> KernelSignatureError:
    """A KernelSignatureError whose message starts with the function's label (and a hint for the user)."""
    return KernelSignatureError(f"{label}: {detail}", function=label, shapes=shapes, hint=hint)
