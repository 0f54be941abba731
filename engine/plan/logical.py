"""Logical plan: immutable TRA operators (scans, one constant tuple, Filter, Project, Join, Aggregate, Retile,
UnionAll, Sort, Limit, and the bound EINSUM and GRAD that the pipeline expands into those, or an EINSUM into one
DenseEinsum)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Union

import numpy as np

from trdb.errors import InternalError
from trdb.kernels.einsum_spec import Resolved
from trdb.plan.expressions import Bound
from trdb.plan.types import Schema
from trdb.storage.tensor_meta import TensorMeta


class Node:
    """What every logical node shares. CHILDREN names the fields that hold its inputs, in order (one field may
    hold a tuple of them: UnionAll's parts, an Einsum's operands): the one statement of a node's children,
    read by `children`, `attributes` and `with_inputs` below and by nothing else."""

    CHILDREN: ClassVar[tuple[str, ...]] = ()

    @property
    def inputs(self) -> tuple:
        return children(self)


def children(node: Any) -> tuple:
    """A node's inputs in order: a logical node's CHILDREN fields, or a physical node's children."""
    found: list = []
    for name in type(node).CHILDREN:
        value = getattr(node, name)
        found.extend(value if isinstance(value, tuple) else (value,))
    return tuple(found)


def attributes(node: Any) -> tuple[tuple[str, Any], ...]:
    """(name, value) of each field of a node that is not one of its inputs: what it is, apart from what it reads."""
    return tuple((f.name, getattr(node, f.name)) for f in dataclasses.fields(node) if f.name not in type(node).CHILDREN)


@dataclass(frozen=True)
class TensorScan(Node):
    """All tuples of a stored tensor relation: its keys, then its tile."""

    tensor: TensorMeta
    schema: Schema

    CHILDREN = ()


@dataclass(frozen=True)
class TableScan(Node):
    """Rows of an ordinary (plain SQL) table read through DuckDB."""

    table: str
    columns: tuple[str, ...]
    schema: Schema

    CHILDREN = ()


@dataclass(frozen=True)
class OneRow(Node):
    """One tuple of no columns, as a SELECT without FROM reads: the relation a constant is projected from
    (a gradient's seed, 1, where the loss is one tuple: autodiff/gradient.py)."""

    schema: Schema = ()

    CHILDREN = ()


@dataclass(frozen=True, eq=False)
class RowsScan(Node):
    """Tuples already computed in this statement (a shared subplan), scanned again. `keys`: the key slots
    its tuples are unique on, derived from the subplan they came from (optimizer/group_sizes.py; None:
    not known)."""

    rows: list
    schema: Schema
    keys: Any = None

    CHILDREN = ()


@dataclass(frozen=True)
class Filter(Node):
    """Keeps the tuples whose predicate (on keys, or a one-element tensor) holds."""

    input: "Plan"
    predicate: Bound

    @property
    def schema(self) -> Schema:
        return self.input.schema

    CHILDREN = ("input",)


@dataclass(frozen=True)
class Project(Node):
    """Rekey and transform: each output column is an expression over one input tuple."""

    input: "Plan"
    exprs: tuple[Bound, ...]
    schema: Schema

    CHILDREN = ("input",)


@dataclass(frozen=True)
class Join(Node):
    """Equi-join on key positions; kind INNER, LEFT or FULL (the missing side's tile is zeros).

    The output is the left tuple followed by the right tuple; `residual` is an extra predicate
    over that combined tuple (inner joins only).
    """

    left: "Plan"
    right: "Plan"
    kind: str
    left_keys: tuple[int, ...]
    right_keys: tuple[int, ...]
    schema: Schema
    residual: Optional[Bound] = None

    CHILDREN = ("left", "right")


@dataclass(frozen=True)
class AggregateCall:
    """SUM, AVG, MIN, MAX or COUNT (arg None for COUNT(*)), elementwise over tiles."""

    function: str
    arg: Optional[Bound]


@dataclass(frozen=True)
class Aggregate(Node):
    """Groups by key expressions; output: the group keys, then one column per aggregate call."""

    input: "Plan"
    group_by: tuple[Bound, ...]
    calls: tuple[AggregateCall, ...]
    schema: Schema

    CHILDREN = ("input",)


@dataclass(frozen=True)
class Retile(Node):
    """Re-cuts the input's tiles to a new tile shape; the output has one key per tile axis.

    The input's keys map in order to its leading tile axes (an axis without a key lies in one tile).
    """

    input: "Plan"
    tile: tuple[int, ...]
    schema: Schema

    CHILDREN = ("input",)


@dataclass(frozen=True)
class UnionAll(Node):
    """UNION ALL of inputs with the same columns."""

    parts: tuple["Plan", ...]
    schema: Schema

    CHILDREN = ("parts",)


@dataclass(frozen=True)
class Sort(Node):
    input: "Plan"
    keys: tuple[Bound, ...]
    descending: tuple[bool, ...]
    nulls_first: tuple[bool, ...]  # each key's NULLs before its values (NULLS FIRST) or after them

    @property
    def schema(self) -> Schema:
        return self.input.schema

    CHILDREN = ("input",)


@dataclass(frozen=True)
class Limit(Node):
    input: "Plan"
    limit: Optional[int]
    offset: int = 0

    @property
    def schema(self) -> Schema:
        return self.input.schema

    CHILDREN = ("input",)


@dataclass(frozen=True)
class SourcePosition:
    """Where a node was written (a statement's or a view's text), for errors raised when it is expanded."""

    text: str
    line: Optional[int]
    column: Optional[int]


@dataclass(frozen=True)
class EinsumOperand:
    """What the decomposition knows of an EINSUM operand: its key positions (mapped to its leading
    tile axes), per tile axis the nominal tile and logical size, and its element type."""

    keys: tuple[int, ...]
    tile: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize


@dataclass(frozen=True)
class Einsum(Node):
    """EINSUM('spec', X, ...) in FROM, bound: the optimizer's decomposition (optimizer/einsum_decomposition.py)
    turns it into joins and aggregates. Output: a key per output letter, then `v` tiled like the
    largest operand along each letter (the decomposition keeps that tiling)."""

    operands: tuple["Plan", ...]
    details: tuple[EinsumOperand, ...]
    spec: Resolved
    schema: Schema
    position: Optional[SourcePosition] = field(default=None, compare=False)

    CHILDREN = ("operands",)


@dataclass(frozen=True)
class DenseEinsum(Node):
    """An EINSUM of whole stored tensors, each read as one array, computed by one kernel call and cut
    into the result's tiles: the optimizer's choice for small dense operands, where joining and
    summing tiles costs more than it spreads (optimizer/whole_products.py). Output as the Einsum's.
    `kernel` is EINSUM(spec, ...) over column i = the whole array of tensor i. `split`: a matrix product
    run in row blocks taken in turn by the workers' threads, one BLAS thread each, beside tile products; `epilogue`: elementwise
    kernels of column 0 = a tile of the product, giving each result tile (a RELU the projection above
    took in; optimizer/rules/dense_products.py)."""

    tensors: tuple[TensorMeta, ...]
    kernel: Bound
    schema: Schema
    split: bool = False
    epilogue: Optional[Bound] = None

    CHILDREN = ()

    @property
    def grid(self) -> tuple[int, ...]:
        """The result's tiles along each axis (its keys run over these)."""
        value = self.schema[-1].type
        return tuple(-(-n // t) for n, t in zip(value.extent, value.tile))


@dataclass(frozen=True)
class Gradient(Node):
    """GRAD(loss view, parameter), bound: autodiff's pass (autodiff/gradient.py) turns it into the plan of
    d(sum of the loss) / d parameter. Output: the parameter's keys, then its gradient tile."""

    input: "Plan"  # the loss
    param: TensorMeta
    schema: Schema
    position: Optional[SourcePosition] = field(default=None, compare=False)

    CHILDREN = ("input",)


Plan = Union[TensorScan, TableScan, OneRow, RowsScan, Filter, Project, Join, Aggregate, Retile, UnionAll, Sort, Limit,
             Einsum, DenseEinsum, Gradient]


def with_inputs(plan: "Plan", inputs: list) -> "Plan":
    """The same node over new inputs; the node itself when no input changed (rewrites keep identity)."""
    if all(new is old for new, old in zip(inputs, plan.inputs)):
        return plan
    names = type(plan).CHILDREN
    if not names:
        raise ValueError(f"{type(plan).__name__} has no inputs to replace")
    if len(names) == 1 and isinstance(getattr(plan, names[0]), tuple):
        changes = {names[0]: tuple(inputs)}
    else:
        changes = dict(zip(names, inputs))
    if isinstance(plan, Join):  # its schema is its inputs' side by side
        changes["schema"] = inputs[0].schema + inputs[1].schema
    return dataclasses.replace(plan, **changes)


def handler(visitor: Any, plan: "Plan", required: bool = True) -> Optional[Callable]:
    """The visitor's method for this node's type (`_Join` for a Join): the one dispatch of every plan
    visitor (cardinality, physical planning, lineage, gradients). A visitor without one is a bug
    (InternalError naming both) unless `required` is false (then None)."""
    method = getattr(visitor, f"_{type(plan).__name__}", None)
    if method is None and required:
        name = getattr(visitor, "__name__", type(visitor).__name__)
        raise InternalError(f"{name} has no rule for the logical operator {type(plan).__name__}")
    return method
