"""Physical plans remembered by the logical plan they were made from: MINIMIZE's steps, repeated queries.

Each MINIMIZE step runs the same bound plans over new shared tuples (the forward pass at the new
parameter values). What the optimizer and the physical planner read of shared tuples is their
count, each key column's distinct values and whether it holds a NULL; when those are the same as
the step that planned, the plan is the same, and only the tuples its RowsScanExecs read change.
So a step after the first plans nothing: its plans are the first step's with the new tuples in.
A connection keeps its memo across statements (a training loop of one-step MINIMIZEs, or a GRAD
after each write, plans once): a stored tensor is known by everything of its metadata but its data
version (every write takes a new one; what planning reads of it, its statistics, is part of the
key), and the settings are part of the key. A scan reads the tiles its connection sees, whatever
version its plan names (the buffer pool keys them by the version the connection sees: catalog.py).
A connection's later MINIMIZE also binds nothing, nor does a query repeated after writes (bound and
expanded once: a GRAD is differentiated once): bound plans are remembered by the catalog's
definitions (which a write's new statistics leave alone) while the tensors they scan keep the
statistics they were bound with.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections import OrderedDict
from typing import Callable, Optional

from trdb.optimizer.cardinality import distinct_keys_of_rows
from trdb.optimizer.nullability import never_null
from trdb.plan import logical as lp
from trdb.plan import physical_operators as po
from trdb.plan.physical import PhysicalNode
from trdb.storage.tensor_meta import TensorMeta

KEPT = 64  # plans a connection remembers (least recently used forgotten)
KEPT_BOUND = 16  # statements whose bound plans it remembers
KEPT_SIGNATURES = 20_000  # subplans over stored data known by a token (held alive) before they start over


class PlanMemo:
    """Physical plans by the logical plan they were made for, with shared tuples known by their statistics.

    A remembered plan holds no tuples: each RowsScan's are replaced by their scan's position among the
    logical plan's RowsScans, so a step's spools are not kept alive by the memo."""

    def __init__(self) -> None:
        self._plans: OrderedDict[tuple, PhysicalNode] = OrderedDict()
        self._bound: OrderedDict[tuple, tuple[list, list[TensorMeta]]] = OrderedDict()
        self._signatures = _Signatures()
        self._expanded: OrderedDict[tuple, tuple[lp.Plan, lp.Plan]] = OrderedDict()
        self._programs: OrderedDict[int, tuple[lp.Plan, object]] = OrderedDict()

    def program(self, plan: lp.Plan):
        """The step program (pipeline/step_program.py) last recorded for the step whose loss is `plan` (the
        object `bound_plans` gave): a training loop of one-step MINIMIZEs runs it, planning nothing; None."""
        found = self._programs.get(id(plan))
        return found[1] if found is not None and found[0] is plan else None

    def keep_program(self, plan: lp.Plan, program) -> None:
        if program is not None:
            _remember(self._programs, id(plan), (plan, program), KEPT_BOUND)

    def bound_plans(self, key: tuple, catalog, bind: Callable[[], list]) -> list:
        """`bind()`'s logical plans, remembered under `key` (the statement) and the catalog's definitions, and
        reused while every tensor they scan has the statistics it was bound with (they then name older data
        versions, as a MINIMIZE's plans do at its later steps)."""
        entry_key = (key, catalog.definitions)
        found = self._bound.get(entry_key)
        if found is not None and all(_as_bound(catalog.tensor(m.name), m) for m in found[1]):
            self._bound.move_to_end(entry_key)
            return found[0]
        plans = bind()
        _remember(self._bound, entry_key, (plans, _scanned(plans)), KEPT_BOUND)
        return plans

    def expanded(self, plan: lp.Plan, how: tuple, expand: Callable[[], lp.Plan]) -> lp.Plan:
        """`expand()`, the plan with its EINSUMs and GRADs expanded under `how` (workers and dense limit),
        remembered by the plan's identity: a step's plans, expanded when bound, are not walked again."""
        key = (id(plan), how)
        found = self._expanded.get(key)
        if found is not None and found[0] is plan:
            self._expanded.move_to_end(key)
            return found[1]
        result = expand()
        _remember(self._expanded, key, (plan, result), KEPT)
        return result

    def lookup(self, plan: lp.Plan, keep_zero_tuples: bool,
               settings: tuple = ()) -> tuple[Optional[PhysicalNode], Optional["Slot"]]:
        """The remembered physical plan of `plan` under `settings` (a snapshot of their values), reading
        `plan`'s shared tuples (None when there is none), and the slot to `put` a new one in (None: `plan`
        cannot be remembered)."""
        leaves: list = []
        try:
            key = _Key((self._signatures.of(plan, leaves), keep_zero_tuples, _sharing(leaves), settings))
        except TypeError:  # a constant holding an array
            return None, None
        found = self._plans.get(key)
        if found is None:
            return None, Slot(key, leaves)
        self._plans.move_to_end(key)
        return with_rows(found, lambda position: leaves[position]), None

    def put(self, slot: Optional["Slot"], node: PhysicalNode) -> None:
        if slot is not None:
            positions = {id(rows): position for position, rows in reversed(list(enumerate(slot.leaves)))}
            _remember(self._plans, slot.key, with_rows(node, lambda rows: positions[id(rows)]), KEPT)


def _remember(entries: OrderedDict, key, value, kept: int) -> None:
    """`value` under `key`, the least recently used entries forgotten past `kept`."""
    entries[key] = value
    while len(entries) > kept:
        entries.popitem(last=False)


class _Key:
    """A plan's key, hashed once (a step's key is a deep tuple: hashed for the look-up and the LRU move)."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple) -> None:
        self.value, self._hash = value, hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _Key) and self._hash == other._hash and self.value == other.value


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where a plan not remembered yet goes: its key, and the tuples its RowsScans read, in order."""

    key: _Key
    leaves: list


def _scanned(plans: list) -> list[TensorMeta]:
    """The stored tensors the plans scan (each subplan visited once: one read twice is one object)."""
    found: dict[int, TensorMeta] = {}
    stack, seen = list(plans), set()
    while stack:
        plan = stack.pop()
        if id(plan) in seen:
            continue
        seen.add(id(plan))
        if isinstance(plan, lp.TensorScan):
            found[id(plan.tensor)] = plan.tensor
        stack.extend(plan.inputs)
    return list(found.values())


class _Signatures:
    """Plans as values: hashable unless a node holds an array; each RowsScan by its schema and statistics.

    A subplan that reads no shared tuples is the same object at every step of a MINIMIZE (and in every
    statement of a training loop): its signature is worked out once and then stands for a token (equal
    signatures, one token), so a step's key is built and hashed over the part that reads its new tuples
    only. Tokens are never given again (a signature forgotten past KEPT_SIGNATURES gets a new one)."""

    def __init__(self) -> None:
        self._by_node: dict[int, tuple[object, tuple]] = {}
        self._tokens: dict[tuple, tuple] = {}
        self._count = itertools.count()

    def of(self, plan, leaves: list) -> tuple:
        """`plan`'s signature, the tuples its RowsScans read appended to `leaves` in order."""
        known = self._by_node.get(id(plan))
        if known is not None and known[0] is plan:
            return known[1]
        if isinstance(plan, lp.RowsScan):
            leaves.append(plan.rows)
            return ("rows", plan.schema, rows_statistics(plan))
        read = len(leaves)
        children = tuple(self.of(child, leaves) for child in plan.inputs)
        fields = tuple(_unversioned(value) for _, value in lp.attributes(plan))
        signature = (type(plan), fields, children)
        if len(leaves) == read:  # over stored data only
            signature = self._token(plan, signature)
        return signature

    def _token(self, plan, signature: tuple) -> tuple:
        try:
            token = self._tokens.get(signature)
        except TypeError:  # a constant holding an array: never remembered
            return signature
        if token is None:
            if len(self._tokens) >= KEPT_SIGNATURES:
                self._by_node, self._tokens = {}, {}
            token = self._tokens[signature] = ("subplan", next(self._count))
        self._by_node[id(plan)] = (plan, token)
        return token


def _unversioned(value):
    """A stored tensor's metadata but its data version (the key of a plan outlives writes of equal statistics)."""
    if isinstance(value, tuple) and value and isinstance(value[0], TensorMeta):  # a DenseEinsum's tensors
        return tuple(_unversioned(v) for v in value)
    return value.with_version(0) if isinstance(value, TensorMeta) else value


def _as_bound(now: Optional[TensorMeta], then: TensorMeta) -> bool:
    """A scanned tensor's metadata now is what the plans were bound with, but its data version (the same object
    where nothing wrote it: most of a model's tensors after a write to one)."""
    return now is then or _unversioned(now) == _unversioned(then)


def rows_statistics(plan: lp.RowsScan) -> tuple:
    """What planning reads of shared tuples: their count, distinct values per key column, NULL-free key columns."""
    keys = [i for i, column in enumerate(plan.schema) if column.is_key]
    return len(plan.rows), distinct_keys_of_rows(plan), tuple(never_null(plan, i) for i in keys)


def _sharing(leaves: list) -> tuple:
    """Which RowsScans read the same tuples (a plan made for two scans of one spool fits no other)."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(rows), position) for position, rows in enumerate(leaves))


def with_rows(node: PhysicalNode, swap: Callable) -> PhysicalNode:
    """`node` with every RowsScan's tuples replaced by `swap(tuples)`."""
    spec = node.spec
    if isinstance(spec, po.RowsScan):
        return _copied(node, spec=_copied(spec, rows=swap(spec.rows)))
    children = tuple(with_rows(child, swap) for child in node.children)
    if all(new is old for new, old in zip(children, node.children)):
        return node
    return _copied(node, children=children)


def _copied(node, **changes):
    """`dataclasses.replace` of a frozen dataclass that computes nothing in its __init__ (a physical node, an
    operator spec), without calling it: a step's program swaps the tuples of every plan it runs, and
    replace's keyword call cost more than the rest of the swap."""
    copy = object.__new__(type(node))
    copy.__dict__.update(node.__dict__)
    copy.__dict__.update(changes)
    return copy
