"""Reverse mode over the logical plan: one derivative rule per logical operator, each a relational plan.

A gradient relation (`Gradient`) holds, per output tuple of an operator (identified by lineage), the
gradient of the loss with respect to some of its tensor columns. Rules: a projection joins its
input with the output gradient and applies the kernels' derivatives; a join splits the gradient and
sums each side's part over its lineage (one left tuple meets many right ones); an aggregation joins
every input tuple with the gradient of its group; a filter passes the gradient of kept tuples; a
scan of the parameter yields a contribution. Contributions of a parameter used twice are summed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from trdb.autodiff.derivatives import backpropagate, output_rule
from trdb.autodiff.lineage import lineage_columns, lineage_width, tensor_sources, with_lineage
from trdb.catalog.names import fold
from trdb.errors import NotSupportedError, ProgrammingError
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, ScalarType, TensorType
from trdb.planner.gradient_binding import gradient_schema, loss_column
from trdb.planner.kernel_calls import call
from trdb.storage.tensor_meta import TensorMeta


@dataclass(frozen=True)
class Gradient:
    """`plan`: lineage columns, then gradients; `columns[k]` is the plan position of output column k's gradient."""

    plan: lp.Plan
    lineage: int
    columns: dict


def _index(plan: lp.Plan, position: int) -> bx.ColumnIndex:
    return bx.ColumnIndex(position, plan.schema[position].type)


def _match(left: lp.Plan, right: lp.Plan, left_keys: tuple[int, ...], right_keys: tuple[int, ...],
           known: dict) -> lp.Plan:
    """Left and right tuples whose keys are equal or both NULL (IS NOT DISTINCT FROM), side by side.

    Lineage and group keys are NULL where an outer join found no partner; such a tuple still has a
    gradient, which an equi-join (NULL never equals NULL) would lose. Each key becomes two that are
    never NULL: COALESCE(k, 0) and COALESCE(k * 0, 1), equal exactly when the keys are not distinct.
    """
    if _constant(right):  # beside every left tuple, with no join
        kept = tuple(_index(left, i) for i in range(len(left.schema)))
        return lp.Project(left, kept + right.exprs, left.schema + right.schema)
    if not (_outer_join_below(left, known) or _outer_join_below(right, known)):  # no NULL key can occur
        return lp.Join(left, right, "INNER", left_keys, right_keys, left.schema + right.schema)
    left_safe, left_new = _null_safe_keys(left, left_keys)
    right_safe, right_new = _null_safe_keys(right, right_keys)
    joined = lp.Join(left_safe, right_safe, "INNER", left_new, right_new, left_safe.schema + right_safe.schema)
    kept = list(range(len(left.schema))) + [len(left_safe.schema) + i for i in range(len(right.schema))]
    return lp.Project(joined, tuple(_index(joined, i) for i in kept), left.schema + right.schema)


def _unique_on(plan: lp.Plan, keys: tuple[int, ...]) -> bool:
    """Whether no two tuples of `plan` have equal `keys`: a stored tensor's scan joined on each of its key
    columns that has more than one tile."""
    if not isinstance(plan, lp.TensorScan):
        return False
    return all(column in keys for column, tiles in enumerate(plan.tensor.grid) if tiles > 1)


def _constant(plan: lp.Plan) -> bool:
    """A relation of one constant tuple (`_constant_seed`'s)."""
    return isinstance(plan, lp.Project) and isinstance(plan.input, lp.OneRow)


def _with_constants(plan: lp.Plan) -> bool:
    """A projection of its input's columns and of constants, one at least: a constant, or one placed beside
    another relation's tuples (`_match`)."""
    return isinstance(plan, lp.Project) and any(not bx.columns_used(e) for e in plan.exprs) and \
        all(isinstance(e, bx.ColumnIndex) or not bx.columns_used(e) for e in plan.exprs)


def _outer_join_below(plan: lp.Plan, known: dict[int, tuple[lp.Plan, bool]]) -> bool:
    """Whether an outer join is below `plan`; `known` remembers each subplan looked into (a gradient plan
    reuses its forward subplans many times over: without it, every join the backward pass builds searched
    the whole forward pass again)."""
    found = known.get(id(plan))
    if found is not None and found[0] is plan:
        return found[1]
    result = (isinstance(plan, lp.Join) and plan.kind != "INNER") or \
        any(_outer_join_below(child, known) for child in plan.inputs)
    known[id(plan)] = (plan, result)  # the plan is kept, so its id is not reused while it is here
    return result


def _null_safe_keys(plan: lp.Plan, keys: tuple[int, ...]) -> tuple[lp.Plan, tuple[int, ...]]:
    extra: list[bx.Bound] = []
    for key in keys:
        column = _index(plan, key)
        extra += [bx.Coalesce((column, bx.Const(0, KEY))),
                  bx.Coalesce((bx.KeyArith("*", column, bx.Const(0, KEY)), bx.Const(1, KEY)))]
    exprs = tuple(_index(plan, i) for i in range(len(plan.schema))) + tuple(extra)
    schema = plan.schema + lineage_columns(len(extra), start=1000)
    width = len(plan.schema)
    return lp.Project(plan, exprs, schema), tuple(range(width, width + len(extra)))


def _gradient_plan(source: lp.Plan, lineage: list[bx.Bound], grads: dict[int, bx.Bound],
                   terms: tuple[bx.Bound, ...] = ()) -> Gradient:
    """The gradient relation `grads` (by column) computed over `source`, with `terms` after them (`_Aggregate`)."""
    order = sorted(grads)
    exprs = tuple(lineage) + tuple(grads[c] for c in order) + terms
    schema = lineage_columns(len(lineage)) + tuple(Column(f"_grad{c}", grads[c].type) for c in order) + \
        _term_columns(terms)
    if _with_constants(source):  # one projection: a constant's gradient passed through a projection is one still,
        # and the columns a constant was placed beside (`_match`) are read where they are
        source, exprs = source.input, tuple(bx.substitute(e, source.exprs) for e in exprs)
    return Gradient(lp.Project(source, exprs, schema), len(lineage),
                    {c: len(lineage) + n for n, c in enumerate(order)})


def _passed_through(gradient: Gradient, offset: int, grads: dict[int, bx.Bound]) -> Gradient:
    """The input's gradient where a projection's derivatives read only the output gradient (`grads`, over the
    projection's input paired with `gradient` from `offset` on): computed on `gradient`'s own tuples. The
    pairing would match each of them to exactly one input tuple (lineage is unique, and a gradient holds
    only lineage of tuples the forward pass made), so it is left out: a join and a scan of the input less."""
    shifted = {column: bx.shift_columns(grad, -offset) for column, grad in grads.items()}
    return _gradient_plan(gradient.plan, [_index(gradient.plan, n) for n in range(gradient.lineage)], shifted)


class Differentiator:
    """Builds the plan of d loss / d param as a relation keyed like the parameter."""

    def __init__(self, param: TensorMeta):
        self.param = param
        self.contributions: list[lp.Plan] = []
        self.outer_joins: dict = {}  # subplans known to have an outer join below them, or not

    def wanted(self, plan: lp.Plan) -> set[int]:
        """Tensor columns of `plan` whose values come (partly) from the parameter."""
        name = fold(self.param.name)
        return {i for i, sources in enumerate(tensor_sources(plan)) if name in sources}

    def backward(self, plan: lp.Plan, gradient: Gradient) -> None:
        if not gradient.columns:
            return
        rule = lp.handler(self, plan, required=False)
        if rule is None:
            raise NotSupportedError(f"GRAD: {type(plan).__name__} is not differentiable")
        rule(plan, gradient)

    # ------------------------------------------------------------ rules

    def _TensorScan(self, plan: lp.TensorScan, gradient: Gradient) -> None:
        value = len(plan.schema) - 1
        if fold(plan.tensor.name) == fold(self.param.name) and value in gradient.columns:
            exprs = tuple(_index(gradient.plan, n) for n in range(gradient.lineage))
            grad = _index(gradient.plan, gradient.columns[value])
            if grad.type.dtype != self.param.dtype:  # a float64 operand made it float64: it is the parameter's
                grad = call("CAST", grad, self.param.dtype.name)
            self.contributions.append(lp.Project(gradient.plan, exprs + (grad,), self.result_schema()))

    def _TableScan(self, plan: lp.TableScan, gradient: Gradient) -> None:
        pass  # ordinary tables hold no parameters

    def _Filter(self, plan: lp.Filter, gradient: Gradient) -> None:
        self.backward(plan.input, gradient)  # filtered-out tuples never had a gradient

    def _Sort(self, plan: lp.Sort, gradient: Gradient) -> None:
        self.backward(plan.input, gradient)

    def _Project(self, plan: lp.Project, gradient: Gradient) -> None:
        wanted = self.wanted(plan.input)
        if not wanted:
            return
        if self._from_output(plan, gradient, wanted):
            return
        joined, offset, lineage = self._paired(plan.input, gradient)
        grads: dict[int, bx.Bound] = {}
        for column, position in gradient.columns.items():
            backpropagate(plan.exprs[column], _index(joined, offset + position), wanted, grads)
        if all(min(bx.columns_used(g), default=offset) >= offset for g in grads.values()):
            self.backward(plan.input, _passed_through(gradient, offset, grads))
            return
        self.backward(plan.input, _gradient_plan(joined, lineage, grads))

    def _from_output(self, plan: lp.Project, gradient: Gradient, wanted: set[int]) -> bool:
        """A projection whose gradients are functions of its outputs (RELU, SIGMOID, ...; columns passed
        through): its output, with lineage, joined with the output gradient; the backward pass then reads
        the tiles the forward pass made (the same subplan) and none of the projection's input. False
        (nothing done) when an expression needs its input."""
        exprs = {column: plan.exprs[column] for column in gradient.columns}
        rules = {column: output_rule(expr) for column, expr in exprs.items()}
        if not any(rules.values()) or not all(rule or isinstance(exprs[column], bx.ColumnIndex)
                                              for column, rule in rules.items()):
            return False
        joined, offset, lineage = self._paired(plan, gradient)
        grads: dict[int, bx.Bound] = {}
        for column, position in gradient.columns.items():
            upstream = _index(joined, offset + position)
            if rules[column] is None:
                source, part = exprs[column].index, upstream
            else:
                source, rule = rules[column]
                part = rule(_index(joined, column), upstream)
            backpropagate(_index(plan.input, source), part, wanted, grads)  # into the input column, if wanted
        self.backward(plan.input, _gradient_plan(joined, lineage, grads))
        return True

    def _paired(self, plan: lp.Plan, gradient: Gradient) -> tuple[lp.Plan, int, list[bx.Bound]]:
        """`plan`'s tuples (with lineage) joined to their gradients on lineage: the joined plan, the position of
        the gradients' first column in it, and the lineage columns."""
        inner, count = with_lineage(plan)
        width = len(plan.schema)
        joined = _match(inner, gradient.plan, tuple(range(width, width + count)), tuple(range(count)),
                        self.outer_joins)
        return joined, len(inner.schema), [_index(joined, width + n) for n in range(count)]

    def _Join(self, plan: lp.Join, gradient: Gradient) -> None:
        left_count = lineage_width(plan.left)
        width = len(plan.left.schema)
        sides = ((plan.left, 0, left_count, 0, plan.right, plan.right_keys),
                 (plan.right, left_count, lineage_width(plan.right), width, plan.left, plan.left_keys))
        for side, lineage_start, count, column_start, other, other_keys in sides:
            columns = {c - column_start: p for c, p in gradient.columns.items()
                       if column_start <= c < column_start + len(side.schema)}
            if columns and self.wanted(side):
                summed = not (self._is_param(side) or _unique_on(other, other_keys))
                self.backward(side, self._side_gradient(gradient, lineage_start, count, columns, summed))

    def _is_param(self, plan: lp.Plan) -> bool:
        return isinstance(plan, lp.TensorScan) and fold(plan.tensor.name) == fold(self.param.name)

    def _side_gradient(self, gradient: Gradient, start: int, count: int, columns: dict,
                       summed: bool = True) -> Gradient:
        """One side's part of a join's gradient, summed over that side's lineage. Not `summed` where the side
        is the parameter itself (its contribution is summed with the others by the parameter's keys at the end,
        `_sum_contributions`: an embedding table met twice in a join, a triple's head and tail, is summed once,
        not once for each side and then again), nor where each of the side's tuples meets at most one tuple of
        the other (each lineage is there once already: a triple joined with the embedding of its head)."""
        source = gradient.plan
        lineage = [_index(source, start + n) for n in range(count)]
        part = _gradient_plan(source, lineage, {c: _index(source, p) for c, p in columns.items()})
        present = part.plan
        if count:  # the missing side of an outer join has NULL lineage and no gradient; a side that is
            # there may have some NULL lineage (its own outer join's missing side), never all of it
            present = lp.Filter(present, bx.IsNullTest(bx.Coalesce(tuple(_index(present, n) for n in range(count))),
                                                       negated=True))
        if not summed:
            return Gradient(present, count, part.columns)
        calls = tuple(lp.AggregateCall("SUM", _index(present, p)) for p in sorted(part.columns.values()))
        groups = tuple(_index(present, n) for n in range(count))
        return Gradient(lp.Aggregate(present, groups, calls, present.schema), count, part.columns)

    def _Aggregate(self, plan: lp.Aggregate, gradient: Gradient) -> None:
        wanted = self.wanted(plan.input)
        if not wanted:
            return
        inner, count = with_lineage(plan.input)
        width, groups = len(plan.input.schema), len(plan.group_by)
        keyed = _keyed(inner, plan.group_by, count)
        group_keys = tuple(range(len(inner.schema), len(keyed.schema)))
        joined = _match(keyed, gradient.plan, group_keys, tuple(range(groups)), self.outer_joins)
        grad_offset, forward_offset = len(keyed.schema), len(keyed.schema) + len(gradient.plan.schema)
        with_forward = any(plan.calls[c - groups].function in ("AVG", "MIN", "MAX") for c in gradient.columns)
        if with_forward:
            # their derivatives need the group's forward result (the extreme value, the count)
            forward = lp.Aggregate(plan.input, plan.group_by, plan.calls + (lp.AggregateCall("COUNT", None),),
                                   plan.schema + (Column("_count", ScalarType(int)),))
            joined = _match(joined, forward, group_keys, tuple(range(groups)), self.outer_joins)
        grads: dict[int, bx.Bound] = {}
        for column, position in gradient.columns.items():
            call_spec = plan.calls[column - groups]
            value, tuples = (_index(joined, forward_offset + column), _index(joined, len(joined.schema) - 1)) \
                if with_forward else (None, None)
            upstream = self._aggregate_upstream(call_spec, _index(joined, grad_offset + position), value, tuples)
            if upstream is not None:
                backpropagate(call_spec.arg, upstream, wanted, grads)
        lineage = [_index(joined, width + n) for n in range(count)]
        # the loss's own aggregate (one tuple, seeded by a constant): its terms beside the gradients, which
        # MINIMIZE's loss sums there (`loss_from_terms`) instead of computing the forward pass once more
        terms = _terms(plan) if not plan.group_by and _constant(gradient.plan) else ()
        self.backward(plan.input, _gradient_plan(joined, lineage, grads, terms))

    @staticmethod
    def _aggregate_upstream(spec: lp.AggregateCall, grad, value, count):
        """What each input tuple of a group receives from the group's output gradient."""
        if spec.function == "SUM":
            return grad
        if spec.function == "AVG":
            return call("/", grad, count)
        if spec.function in ("MIN", "MAX"):
            return call("*", grad, call("CAST", call("=", spec.arg, value), grad.type.dtype.name))
        return None  # COUNT has no gradient

    def _UnionAll(self, plan: lp.UnionAll, gradient: Gradient) -> None:
        source = gradient.plan
        for branch, part in enumerate(plan.parts):
            if not self.wanted(part):
                continue
            count = lineage_width(part)
            kept = lp.Filter(source, bx.Compare("=", _index(source, 0), bx.Const(branch, KEY)))
            lineage = [_index(kept, 1 + n) for n in range(count)]
            grads = {c: _index(kept, p) for c, p in gradient.columns.items()}
            self.backward(part, _gradient_plan(kept, lineage, grads))

    # ------------------------------------------------------------ result

    def result_schema(self) -> tuple[Column, ...]:
        return gradient_schema(self.param)


def gradient_plan(loss: lp.Plan, param: TensorMeta) -> lp.Plan:
    """The plan of d(sum of the loss's tuples) / d param: param's keys, then the gradient tile."""
    value = loss_column(loss)
    differentiator = Differentiator(param)
    if not differentiator.wanted(loss):
        raise ProgrammingError(f'GRAD: the loss does not depend on "{param.name}"')
    differentiator.backward(loss, _constant_seed(loss, value) or _seed(loss, value))
    return _sum_contributions(differentiator)


def _seed(loss: lp.Plan, value: int) -> Gradient:
    """d loss / d loss: ones shaped as each of the loss's tuples, paired with them by lineage."""
    root, count = with_lineage(loss)
    lineage = [_index(root, len(loss.schema) + n) for n in range(count)]
    return _gradient_plan(root, lineage, {value: call("ONES_LIKE", _index(root, value))})


def _constant_seed(loss: lp.Plan, value: int) -> Optional[Gradient]:
    """`_seed` where the loss is one scalar tuple whatever its input (an aggregate without GROUP BY, projected):
    the constant 1, on one tuple without lineage. The loss itself is not computed for it (a GRAD ran the whole
    forward pass once more, only to find the one tuple). None where the loss is not so."""
    kind = loss.schema[value].type
    _, below = _projections_above(loss)
    if not (isinstance(below, lp.Aggregate) and not below.group_by and isinstance(kind, TensorType) and kind.tile == ()):
        return None
    return _gradient_plan(lp.OneRow(), [], {value: call("CAST", bx.Const(1, ScalarType(int)), kind.dtype.name)})


def loss_from_terms(loss: lp.Plan) -> lp.Plan:
    """The loss, where it is one tuple seeded by a constant (`_constant_seed`), with its aggregate reading its
    terms from the aggregate's input with lineage, as the projection computes them that a gradient computes its
    derivatives in (`_Aggregate`): made to read that projection (optimizer/subsumed_projections.py), a plan run
    beside the gradients (MINIMIZE's) sums their tuples and does not compute the forward pass itself (see
    `sums_gradient_terms`). Else the loss as it is."""
    chain, below = _projections_above(loss)
    if _constant_seed(loss, loss_column(loss)) is None or not isinstance(below, lp.Aggregate):
        return loss
    inner, count = with_lineage(below.input)
    terms = _terms(below)
    read = lp.Project(_keyed(inner, (), count), terms, _term_columns(terms))
    numbered = iter(range(len(terms)))
    calls = tuple(c if c.arg is None else lp.AggregateCall(c.function, _index(read, next(numbered)))
                  for c in below.calls)
    rebuilt: lp.Plan = lp.Aggregate(read, (), calls, below.schema)
    for project in reversed(chain):
        rebuilt = lp.with_inputs(project, [rebuilt])
    return rebuilt


def sums_gradient_terms(loss: lp.Plan) -> bool:
    """Whether `loss_from_terms`'s loss reads the terms from a gradient's projection (where no gradient computed
    them, its own projection would share the forward pass with lineage whole, not streamed: the loss is then
    better computed as it was)."""
    _, below = _projections_above(loss)
    source = below.input if isinstance(below, lp.Aggregate) else None
    return isinstance(source, lp.Project) and isinstance(source.input, lp.Project) and \
        any(column.name.startswith("_grad") for column in source.input.schema)


def _keyed(inner: lp.Plan, group_by: tuple, count: int) -> lp.Project:
    """An aggregate's input with lineage (`inner`, `count` lineage columns) and its group keys after them."""
    return lp.Project(inner, tuple(_index(inner, i) for i in range(len(inner.schema))) + group_by,
                      inner.schema + lineage_columns(len(group_by), count))


def _terms(aggregate: lp.Aggregate) -> tuple[bx.Bound, ...]:
    """What an aggregate's calls sum (or take the extreme of, or average), tuple by tuple."""
    return tuple(c.arg for c in aggregate.calls if c.arg is not None)


def _term_columns(terms: tuple[bx.Bound, ...]) -> tuple[Column, ...]:
    return tuple(Column(f"_term{n}", term.type) for n, term in enumerate(terms))


def _projections_above(plan: lp.Plan) -> tuple[list[lp.Project], lp.Plan]:
    """The projections on top of `plan`, outermost first, and what is below them."""
    chain = []
    while isinstance(plan, lp.Project):
        chain.append(plan)
        plan = plan.input
    return chain, plan


def _sum_contributions(differentiator: Differentiator) -> lp.Plan:
    schema = differentiator.result_schema()
    parts = differentiator.contributions
    union = parts[0] if len(parts) == 1 else lp.UnionAll(tuple(parts), schema)
    keys = tuple(bx.ColumnIndex(i, KEY) for i in range(len(schema) - 1))
    total = lp.Aggregate(union, keys, (lp.AggregateCall("SUM", bx.ColumnIndex(len(keys), schema[-1].type)),), schema)
    return lp.Project(total, keys + (bx.ColumnIndex(len(keys), schema[-1].type),), schema)
