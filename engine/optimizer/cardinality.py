"""Cardinality and cost estimates of logical operators from catalog statistics (tuples, distinct keys, FLOPs)."""
from __future__ import annotations

import math
import weakref
from typing import Optional

from trdb.config.unit_costs import SPARSE_FLOP_COST
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.estimates import Estimate
from trdb.plan.types import Schema, TensorType
from trdb.planner.expression_binder import to_arg
from trdb.storage.ordinary_tables import estimated_rows, integer_ranges

KEY_BYTES = 8
CSR_BYTES_PER_NONZERO = 8  # a float32 value and its int32 column index (row pointers left out)
_DENSE_RESULTS = frozenset({"MATMUL", "EINSUM"})  # CSR x dense products come out dense
DEFAULT_TABLE_ROWS = 1000.0
DEFAULT_SELECTIVITY = 0.5
RANGE_SELECTIVITY = 1 / 3


def row_bytes(schema: Schema, fill: tuple[float, ...] = ()) -> float:
    total = 0.0
    for position, column in enumerate(schema):
        if isinstance(column.type, TensorType):
            dense = math.prod(column.type.tile) * column.type.dtype.itemsize
            total += dense * (fill[position] if position < len(fill) else 1.0)
        else:
            total += KEY_BYTES
    return total


def stored_fill(meta) -> tuple[float, float]:
    """(bytes, FLOPs) of a tensor's stored tiles against dense tiles: CSR tiles count their non-zeros."""
    if not meta.tuple_count or not meta.csr_tuples:
        return 1.0, 1.0
    csr_tiles = meta.csr_nnz / max(1, math.prod(meta.tile))  # CSR non-zeros, in whole dense tiles
    byte_fill = (meta.dense_tuples + csr_tiles * CSR_BYTES_PER_NONZERO / meta.dtype.itemsize) / meta.tuple_count
    flop_fill = (meta.dense_tuples + csr_tiles * SPARSE_FLOP_COST) / meta.tuple_count
    return min(1.0, byte_fill), min(1.0, flop_fill)


def expression_flops(expr: bx.Bound, fill: tuple[float, ...] = ()) -> float:
    """FLOPs of evaluating an expression once (on nominal tiles; sparse kernels on CSR columns scaled)."""
    total = 0.0
    if isinstance(expr, bx.Call):
        total += expr.function.flops([to_arg(a) for a in expr.args]) * _call_fill(expr, fill)
    for child in bx.children(expr):
        total += expression_flops(child, fill)
    return total


def expression_elements(expr: bx.Bound, fill: tuple[float, ...] = ()) -> float:
    """Elements the kernels of an expression write once (every call's result tile)."""
    total = 0.0
    if isinstance(expr, bx.Call) and isinstance(expr.type, TensorType):
        total += math.prod(expr.type.tile) * _output_fill(expr, fill)
    for child in bx.children(expr):
        total += expression_elements(child, fill)
    return total


def _call_fill(call: bx.Call, fill: tuple[float, ...]) -> float:
    """A kernel with a sparse version does work in proportion to its sparsest column argument."""
    if not call.function.keeps_sparse or not fill:
        return 1.0
    return min((fill[a.index] for a in call.args if isinstance(a, bx.ColumnIndex) and a.index < len(fill)),
               default=1.0)


def _output_fill(expr: bx.Bound, fill: tuple[float, ...]) -> float:
    """How sparse a projected column stays: passed through, or a zero-preserving kernel of a CSR column."""
    if isinstance(expr, bx.ColumnIndex):
        return fill[expr.index] if expr.index < len(fill) else 1.0
    if isinstance(expr, bx.Call) and expr.function.name not in _DENSE_RESULTS:
        return _call_fill(expr, fill)
    return 1.0


def _distinct_of(expr: bx.Bound, distinct: tuple) -> Optional[float]:
    if isinstance(expr, bx.ColumnIndex):
        return distinct[expr.index]
    if isinstance(expr, bx.KeyArith):
        for side in (expr.left, expr.right):
            if isinstance(side, bx.ColumnIndex):
                return distinct[side.index]
    return None


_DISTINCT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per spool: a spilled one is read once


# database -> {(table, estimated rows, columns, file generation): integer_ranges}: planning asks once per
# size and commit (a write of the same row count, or another database, reads them again)
_RANGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _key_ranges(db, plan: lp.TableScan, rows: int) -> dict:
    columns = tuple(name for name, c in zip(plan.columns, plan.schema) if c.is_key)
    key = (plan.table, rows, columns, db.file.generation)
    known = _RANGES.setdefault(db, {})
    if key not in known:
        if len(known) > 256:
            known.clear()
        known[key] = integer_ranges(db, plan.table, columns)
    return known[key]


def distinct_keys_of_rows(plan: lp.RowsScan) -> tuple:
    """Distinct values per key column of computed tuples (a list, or a spool: read in one pass, remembered)."""
    known = _DISTINCT.get(plan.rows) if not isinstance(plan.rows, list) else None
    if known is None:
        keys = [i for i, c in enumerate(plan.schema) if c.is_key]
        if isinstance(plan.rows, list):
            seen: list[set] = [set() for _ in keys]
            for row in plan.rows:
                for values, i in zip(seen, keys):
                    values.add(row[i])
            counts = dict(zip(keys, map(len, seen)))
        else:  # a spool counts its column batches' keys as arrays
            counts = dict(zip(keys, plan.rows.distinct_keys(keys)))
        known = tuple(float(counts[i]) if i in counts else None for i in range(len(plan.schema)))
        if not isinstance(plan.rows, list):
            _DISTINCT[plan.rows] = known
    return known


def selectivity(predicate: bx.Bound, distinct: tuple) -> float:
    """Fraction of tuples a predicate keeps (independence between conjuncts assumed)."""
    result = 1.0
    for conjunct in bx.conjuncts(predicate):
        result *= _conjunct_selectivity(conjunct, distinct)
    return result


def _conjunct_selectivity(expr: bx.Bound, distinct: tuple) -> float:
    if isinstance(expr, bx.Compare):
        values = [_distinct_of(side, distinct) for side in (expr.left, expr.right)]
        known = [v for v in values if v]
        if expr.op == "=":
            return 1 / max(known) if known else 0.1
        return DEFAULT_SELECTIVITY if expr.op == "<>" else RANGE_SELECTIVITY
    if isinstance(expr, bx.InSet):
        d = _distinct_of(expr.arg, distinct)
        fraction = min(1.0, len(expr.values) / d) if d else DEFAULT_SELECTIVITY
        return 1 - fraction if expr.negated else fraction
    if isinstance(expr, bx.Logical) and expr.op == "OR":
        keep = 1.0
        for arg in expr.args:
            keep *= 1 - _conjunct_selectivity(arg, distinct)
        return 1 - keep
    return DEFAULT_SELECTIVITY


def _narrowed(predicate: bx.Bound, distinct: tuple) -> tuple:
    """Distinct values per column once `predicate` holds: a column kept IN a set has at most its values."""
    narrowed = list(distinct)
    for conjunct in bx.conjuncts(predicate):
        if isinstance(conjunct, bx.InSet) and not conjunct.negated and isinstance(conjunct.arg, bx.ColumnIndex):
            index = conjunct.arg.index
            known = narrowed[index]
            narrowed[index] = float(len(conjunct.values)) if known is None else min(known, len(conjunct.values))
    return tuple(narrowed)


class Estimator:
    """Estimates for each logical operator; tables' sizes come from the catalog."""

    def __init__(self, catalog=None):
        self.catalog = catalog
        self._memo: dict[int, tuple[lp.Plan, Estimate]] = {}

    def estimate(self, plan: lp.Plan) -> Estimate:
        cached = self._memo.get(id(plan))
        if cached is None or cached[0] is not plan:
            cached = (plan, lp.handler(self, plan)(plan))
            self._memo[id(plan)] = cached
        return cached[1]

    def total_cost(self, plan: lp.Plan) -> float:
        """The work of running a whole plan on one worker: kernel FLOPs plus a cost per tuple."""
        return self.estimate(plan).cost + sum(self.total_cost(child) for child in plan.inputs)

    def _TensorScan(self, plan: lp.TensorScan) -> Estimate:
        meta = plan.tensor
        rows = float(meta.tuple_count)
        grid = meta.grid
        counted = meta.distinct_keys
        distinct = tuple(float(counted[d]) if counted and d < len(counted) else
                         float(min(grid[d], rows)) if d < len(grid) else None for d in range(len(meta.keys)))
        byte_fill, flop_fill = stored_fill(meta)
        keys = (1.0,) * len(meta.keys)
        return Estimate(rows, row_bytes(plan.schema, keys + (byte_fill,)), distinct + (None,), fill=keys + (flop_fill,))

    def _DenseEinsum(self, plan: lp.DenseEinsum) -> Estimate:
        grid = plan.grid
        flops, written = expression_flops(plan.kernel), expression_elements(plan.kernel)
        if plan.epilogue is not None:  # per tile
            flops += math.prod(grid) * expression_flops(plan.epilogue)
            written += math.prod(grid) * expression_elements(plan.epilogue)
        return Estimate(float(math.prod(grid)), row_bytes(plan.schema), tuple(map(float, grid)) + (None,),
                        flops, written=written)

    def _OneRow(self, plan: lp.OneRow) -> Estimate:
        return Estimate(1.0, 0.0, ())

    def _RowsScan(self, plan: lp.RowsScan) -> Estimate:
        return Estimate(float(len(plan.rows)), row_bytes(plan.schema), distinct_keys_of_rows(plan))

    def _TableScan(self, plan: lp.TableScan) -> Estimate:
        rows = DEFAULT_TABLE_ROWS
        ranges: dict = {}
        if self.catalog is not None:
            estimated = estimated_rows(self.catalog.db, plan.table)
            if estimated is not None:
                rows = float(estimated)
            ranges = _key_ranges(self.catalog.db, plan, int(rows))
        # a key column holds at most as many values as lie between its least and greatest
        distinct = tuple(min(rows, float(ranges.get(name, rows))) if c.is_key else None
                         for name, c in zip(plan.columns, plan.schema))
        return Estimate(rows, row_bytes(plan.schema), distinct)

    def _Filter(self, plan: lp.Filter) -> Estimate:
        child = self.estimate(plan.input)
        rows = child.rows * selectivity(plan.predicate, child.distinct)
        distinct = tuple(min(d, rows) if d is not None else None for d in _narrowed(plan.predicate, child.distinct))
        return Estimate(rows, child.row_bytes, distinct, child.rows * expression_flops(plan.predicate, child.fill),
                        child.fill, child.rows * expression_elements(plan.predicate, child.fill))

    def _Project(self, plan: lp.Project) -> Estimate:
        child = self.estimate(plan.input)
        distinct = tuple(_distinct_of(e, child.distinct) for e in plan.exprs)
        flops = child.rows * sum(expression_flops(e, child.fill) for e in plan.exprs)
        fill = tuple(_output_fill(e, child.fill) for e in plan.exprs)
        written = child.rows * sum(expression_elements(e, child.fill) for e in plan.exprs)
        return Estimate(child.rows, row_bytes(plan.schema, fill), distinct, flops, fill, written)

    def _Join(self, plan: lp.Join) -> Estimate:
        left, right = self.estimate(plan.left), self.estimate(plan.right)
        rows = left.rows * right.rows
        for lk, rk in zip(plan.left_keys, plan.right_keys):
            known = [d for d in (left.distinct[lk], right.distinct[rk]) if d]
            rows /= max(known) if known else 10.0
        if plan.kind in ("LEFT", "FULL"):
            rows = max(rows, left.rows)
        if plan.kind == "FULL":
            rows = max(rows, right.rows)
        distinct = tuple(min(d, rows) if d is not None else None for d in left.distinct + right.distinct)
        fill = padded(left.fill, len(plan.left.schema)) + padded(right.fill, len(plan.right.schema))
        residual = plan.residual
        flops = rows * expression_flops(residual, fill) if residual is not None else 0.0
        written = rows * expression_elements(residual, fill) if residual is not None else 0.0
        return Estimate(rows, left.row_bytes + right.row_bytes, distinct, flops, fill, written)

    def _Aggregate(self, plan: lp.Aggregate) -> Estimate:
        child = self.estimate(plan.input)
        groups = 1.0
        for expr in plan.group_by:
            groups *= _distinct_of(expr, child.distinct) or max(1.0, child.rows ** 0.5)
        groups = max(1.0, min(groups, child.rows)) if plan.group_by else 1.0
        flops = written = 0.0
        for call in plan.calls:
            if call.arg is not None:
                tile = call.arg.type.tile if isinstance(call.arg.type, TensorType) else ()
                flops += child.rows * expression_flops(call.arg, child.fill)
                written += child.rows * (math.prod(tile) + expression_elements(call.arg, child.fill))
        distinct = tuple(min(groups, _distinct_of(e, child.distinct) or groups) for e in plan.group_by)
        return Estimate(groups, row_bytes(plan.schema), distinct + (None,) * len(plan.calls), flops,
                        written=written)

    def _Retile(self, plan: lp.Retile) -> Estimate:
        child, value = self.estimate(plan.input), plan.schema[-1].type
        ratio = math.prod(plan.input.schema[-1].type.tile) / max(1, math.prod(plan.tile))
        grid = math.prod(math.ceil(e / t) for e, t in zip(value.extent, plan.tile)) if all(value.extent) else None
        rows = min(child.rows * max(ratio, 1.0), grid or math.inf)
        return Estimate(rows, row_bytes(plan.schema), (None,) * len(plan.schema), child.rows * child.row_bytes)

    def _UnionAll(self, plan: lp.UnionAll) -> Estimate:
        parts = [self.estimate(p) for p in plan.parts]
        rows = sum(p.rows for p in parts)
        distinct = tuple(sum(d) if all(d) else None for d in zip(*(p.distinct for p in parts))) if parts else \
            (None,) * len(plan.schema)  # no parts (a gradient with no path to its tensor): nothing is known
        return Estimate(rows, max((p.row_bytes for p in parts), default=row_bytes(plan.schema)), distinct)

    def _Sort(self, plan: lp.Sort) -> Estimate:
        child = self.estimate(plan.input)
        return Estimate(child.rows, child.row_bytes, child.distinct, fill=child.fill)

    def _Limit(self, plan: lp.Limit) -> Estimate:
        child = self.estimate(plan.input)
        rows = child.rows if plan.limit is None else min(child.rows, float(plan.limit))
        return Estimate(rows, child.row_bytes, child.distinct, fill=child.fill)


def padded(fill: tuple[float, ...], width: int) -> tuple[float, ...]:
    return tuple(fill) + (1.0,) * (width - len(fill))
