"""HashAggregateExec: groups by keys; SUM, AVG, MIN, MAX over tiles (dense or CSR), COUNT(*); partial states spill."""
from __future__ import annotations

import math
from typing import Iterable, Iterator, Optional

import numpy as np

from trdb.errors import DataError
from trdb.execution.column_batch import is_columns
from trdb.execution.operators.accumulator import Accumulator, Growth
from trdb.execution.operators.operator import Batch, BlockingOperator, PhysicalOperator
from trdb.execution.tile_math.column_groups import ColumnGroups, group_keys, one_group
from trdb.execution.tile_math.compile import compile_expr
from trdb.execution.tile_math.inplace import FRESH
from trdb.execution.tile_math.key_columns import key_function
from trdb.execution.tile_math.product_sharing import ProductShare, SharedProducts
from trdb.execution.tile_math.product_sum import product_sum_feed
from trdb.execution.tile_math.stacked_sums import stacked_sums
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse, nbytes
from trdb.plan import expressions as bx
from trdb.plan.logical import AggregateCall
from trdb.plan.types import Schema, TensorType
from trdb.storage.spill import READ_BATCH_BYTES

PARTITIONS = 8            # spill files per spill (each is merged on its own, so 1/8 of the groups at a time)
MAX_DEPTH = 3             # a partition whose merge is refused is split again this many times, then merged anyway
GROUP_BYTES = 200         # a group's dict entry, key and accumulator objects, besides its tiles
MIN_READ_BYTES = 64 << 10  # spilled states are read back in batches of at least this many tile bytes


def _by_group(batch: Batch, keys: list) -> list[tuple[tuple, tuple]]:
    """A batch's rows with their group keys, each group's rows together (in their order; the groups in the
    order they first appear): a group that the batch completes is handed on before the next group's
    kernels run, not after the whole batch's (a matmul's join gives each group's products interleaved)."""
    grouped: dict[tuple, list] = {}
    for row in batch:
        grouped.setdefault(tuple(k(row) for k in keys), []).append(row)
    return [(key, row) for key, rows in grouped.items() for row in rows]


class HashAggregateExec(BlockingOperator):
    """Groups in a hash table while its reservation grows; when refused, the partial states spill to
    PARTITIONS files by a hash of the group key, and each file is merged on its own at the end (split
    again with another hash seed when its merge is refused too). Output streams, group by group; a group
    complete at `group_rows` tuples (optimizer/group_sizes.py) leaves at once, before the input ends.
    `canvas`: set by the executor on the result's last aggregate, whose dense sums it places. With sibling
    instances on the local executor, its tile products may be computed by them (tile_math/product_sharing.py)."""

    canvas = None
    _shared: Optional[SharedProducts] = None

    def __init__(self, child: PhysicalOperator, group_by: tuple, calls: tuple[AggregateCall, ...], schema: Schema,
                 partial: bool = False, group_rows: Optional[int] = None):
        super().__init__()
        self.partial = partial  # a partial aggregate over no tuples emits nothing: the final step decides
        self.group_rows = group_rows  # a group with this many tuples is complete: handed on at once
        self.children = (child,)
        self.group_by = group_by
        self.calls = calls
        self.schema = schema

    def share_products(self, share: ProductShare) -> None:
        """Compute tile products with the other instances of this aggregate (their `share`)."""
        self._shared = share.member()

    def _output(self) -> Iterator[Batch]:
        groups: dict[tuple, list[Accumulator]] = {}
        partitions = yield from self._read(groups)
        if partitions is None and self._columns is not None and self._columns.tuples:
            yield from self._columns.batches(len(self.group_by))  # every batch went into the arrays
            self._columns = None
            self._memory.release_all()
            return
        if partitions is None:
            if not groups and not self.group_by and not self.partial:
                groups[()] = self._new_group()
            rows = self._results(groups)
        else:
            rows = self._merge_all(self._spill(groups, partitions, seed=0), depth=0)
        yield from self._streamed(rows)

    def _read(self, groups: dict) -> Iterator[Batch]:
        """Read the input into `groups`, spilling when refused memory; yields the result row of each group
        as soon as it is complete (`group_rows` tuples), and returns the spill files (None: none)."""
        backend = self.ctx.backend
        keys = [compile_expr(g, backend) for g in self.group_by]
        canvas = self.canvas
        shared = self._shared
        feeds = [self._feed(c, backend, canvas, shared) for c in self.calls]
        self._growth = Growth()
        self._memory = self.reservation(self._minimum())
        partitions = None
        child = self.children[0]
        complete_at = self.group_rows if self.group_rows and self.calls else -1
        completed: set = set()
        stacked = stacked_sums(self.calls, backend)
        self._columns = self._column_groups(stacked)
        while (batch := child.next_batch()) is not None:
            if self._columns is not None:
                added = self._add_columns(batch, stacked)
                if added and not self._columns_refused:
                    continue
                self._columns_to_groups(groups, completed)  # a batch of tuples, or no room: on as a dict
                if added:
                    batch = []  # its tuples are in the groups already
            if stacked is not None:  # what could not be summed stacked goes on tuple by tuple below
                batch, touched = self._add_stacked(groups, batch, keys, stacked, completed)
                for key in touched:
                    if groups[key][0].rows == complete_at:
                        completed.add(key)
                        yield self._handed_on(groups, key)
            keyed = _by_group(batch, keys) if complete_at > 0 else ((tuple(k(row) for k in keys), row) for row in batch)
            for key, row in keyed:
                accumulators = groups.get(key)
                if accumulators is None:
                    accumulators = self._group(groups, key, completed)
                for accumulator, feed in zip(accumulators, feeds):
                    feed(accumulator, row)
                if accumulators[0].rows == complete_at:  # handed on now: the batch's next rows may take long
                    completed.add(key)
                    if shared is not None:
                        for accumulator in accumulators:
                            shared.settle(accumulator.order)
                    yield self._handed_on(groups, key)
            if not self._fits():
                if shared is not None:
                    shared.settle_all()
                partitions = self._spill(groups, partitions, seed=0)
        if shared is not None:
            shared.input_ended()
        return partitions

    def _add_stacked(self, groups: dict, batch: Batch, keys: list, stacked, completed: set) -> tuple[Batch, list]:
        """Add what of a batch can be summed stacked to its groups (tile_math/stacked_sums.py); returns the rest,
        and the keys of the groups it added to."""
        sums, rest = stacked(batch, self._group_keys(batch, keys))
        xp = self.ctx.backend.xp
        for key, (count, values) in sums.items():
            accumulators = groups.get(key)
            if accumulators is None:
                accumulators = self._group(groups, key, completed)
            for accumulator, value in zip(accumulators, values):
                accumulator.absorb(value, count, xp)
        return [batch[position] for position in rest], list(sums)

    _columns: Optional[ColumnGroups] = None  # the groups as arrays while every batch is a column batch

    def _column_groups(self, stacked) -> Optional[ColumnGroups]:
        """Arrays for the groups (tile_math/column_groups.py) where the aggregate allows them: stacked sums
        (no tile products, so none shared with sibling instances), groups by key columns, no result placed
        in a canvas."""
        self._columns_refused, self._column_bytes = False, 0
        self._key_columns = [key_function(g) for g in self.group_by]
        if stacked is None or self.canvas is not None or any(f is None for f in self._key_columns):
            return None
        width = len(self.group_by)
        return ColumnGroups([c.function for c in self.calls],
                            [not isinstance(self.schema[width + n].type, TensorType) for n in range(len(self.calls))])

    _columns_refused = False  # the budget refused the arrays room: the groups go on as a dict
    _key_columns: list = []   # each group key's function over a column batch's arrays (None: per tuple)
    _column_bytes = 0         # what the arrays hold, reserved

    def _add_columns(self, batch: Batch, stacked) -> bool:
        """Add a column batch to the arrays; False (nothing added) for any other batch or one whose values do
        not stack. A batch the budget refuses room for is added (it is held) and `_columns_refused` set."""
        if not is_columns(batch):
            return False
        keys = group_keys(batch, self._key_columns)
        counts = None
        if keys is not None and len(keys) and one_group(keys):  # one group: its totals made at once
            values = stacked.group_total(batch)
            keys, counts = (keys[:1], np.array([len(keys)], dtype=np.int64)) if values is not None else (keys, None)
        if counts is None:
            values = stacked.per_tuple(batch) if keys is not None else None
        if values is None or not self._columns.accepts(values):
            return False
        grown = self._columns.add(keys, values, counts)
        if not self._memory.try_grow(grown):
            self._memory.grow(grown)
            self._columns_refused = True
        self._column_bytes += grown
        return True

    def _columns_to_groups(self, groups: dict, completed: set) -> None:
        """The arrays' groups into the dict of accumulators (which counts their bytes itself), and no arrays
        from here on."""
        columns, self._columns = self._columns, None
        xp = self.ctx.backend.xp
        for key, count, values in columns.parts_as_groups():
            accumulators = groups.get(key) or self._group(groups, key, completed)
            for accumulator, value in zip(accumulators, values):
                accumulator.absorb(value, count, xp)
        self._memory.shrink(self._column_bytes)
        self._column_bytes = 0

    def _group_keys(self, batch: Batch, keys: list) -> list[tuple]:
        """Each tuple's group key; a column batch's from its key arrays where the group keys are key expressions
        (tile_math/key_columns.py)."""
        if is_columns(batch):
            if not self.group_by:
                return [()] * len(batch)
            if all(f is not None for f in self._key_columns):
                arrays = group_keys(batch, self._key_columns)
                if arrays is not None:
                    return list(map(tuple, arrays.tolist()))
        return [tuple(k(row) for k in keys) for row in batch]

    def _group(self, groups: dict, key: tuple, completed: set) -> list[Accumulator]:
        """A new group's accumulators; a key whose group was complete already is a damaged tensor."""
        if key in completed:
            raise DataError(f"group {key} of an aggregate has more than the {self.group_rows} tuples "
                            "its stored tensors can give: a tensor it reads holds one key twice (a "
                            "damaged database file?)",
                            hint="check the tensors with SELECT keys, COUNT(*) ... GROUP BY keys")
        accumulators = groups[key] = self._new_group()
        if self.canvas is not None:
            accumulators[0].key = key
        return accumulators

    def _handed_on(self, groups: dict, key: tuple) -> Batch:
        """The result row of a complete group, which is forgotten (its memory given back)."""
        accumulators = groups.pop(key)
        freed = GROUP_BYTES + sum(nbytes(a.value) for a in accumulators if getattr(a.value, "ndim", 0))
        row = self._row(key, accumulators)
        unclaimed = min(freed, self._growth.bytes)  # not yet in the reservation
        self._growth.bytes -= unclaimed
        self._memory.shrink(freed - unclaimed)
        return [row]

    def _new_group(self) -> list[Accumulator]:
        self._growth.bytes += GROUP_BYTES
        return [Accumulator(c.function, self._growth) for c in self.calls]

    def _minimum(self) -> int:
        """One tile's working set: each call's accumulator tile and the tile coming in."""
        types = [c.type for c in self.schema[len(self.group_by):]]
        tiles = sum(math.prod(t.tile) * np.dtype(t.dtype).itemsize for t in types if isinstance(t, TensorType))
        return 2 * tiles + GROUP_BYTES * PARTITIONS

    def _fits(self, force: bool = False) -> bool:
        """Whether the reservation covers what the groups grew by (`force`: it must, past the budget)."""
        grown, self._growth.bytes = self._growth.bytes, 0
        if force:
            self._memory.grow(grown)
            return True
        return self._memory.try_grow(grown)

    def _results(self, groups: dict) -> Iterator[tuple]:
        """The final rows of the groups held, streamed; their memory is given back after the last."""
        for key, accumulators in groups.items():
            yield self._row(key, accumulators)
        groups.clear()
        self._memory.release_all()

    def _row(self, key: tuple, accumulators: list[Accumulator]) -> tuple:
        """A group's result row: its key, then each call's result."""
        xp, calls = self.ctx.backend.xp, self.schema[len(self.group_by):]
        return key + tuple(a.result(c.type, xp) for a, c in zip(accumulators, calls))

    # ---------------------------------------------------------------- spilling

    def _spill(self, groups: dict, partitions: Optional[list], seed: int) -> list:
        """Write the groups' partial states (key, then value and count per call) to the partition files;
        the groups are forgotten and their memory given back."""
        partitions = partitions or [self.spill_file("aggregate") for _ in range(PARTITIONS)]
        states = (key + tuple(x for a in accumulators for x in (a.value, a.count))
                  for key, accumulators in groups.items())
        self._write(states, partitions, seed)
        groups.clear()
        self._memory.release_all()
        return partitions

    def _write(self, states: Iterable[tuple], partitions: list, seed: int) -> None:
        """Append state rows to the partition their key hashes to under `seed` (files closed after:
        no write buffers are held between spills)."""
        width = len(self.group_by)
        buckets: list[list] = [[] for _ in partitions]
        for state in states:
            buckets[hash((seed, state[:width])) % len(partitions)].append(state)
        for bucket, partition in zip(buckets, partitions):
            if bucket:
                self._memory.note_spilled(partition.write(bucket))
                partition.finish()

    def _merge_all(self, partitions: list, depth: int) -> Iterator[tuple]:
        for partition in partitions:
            yield from self._merge(partition, depth)
            partition.remove()  # its disk space back now, not at close

    def _merge(self, partition, depth: int) -> Iterator[tuple]:
        """The final rows of one partition's groups: their spilled states combined."""
        groups: dict[tuple, list[Accumulator]] = {}
        batches = partition.batches(min(READ_BATCH_BYTES, max(self._memory.minimum, MIN_READ_BYTES)))
        for batch in batches:
            for state in batch:
                self._absorb(groups, state)
            if not self._fits(force=depth >= MAX_DEPTH or len(groups) <= 1):
                yield from self._repartition(groups, batches, depth + 1)
                return
        yield from self._results(groups)

    def _repartition(self, groups: dict, rest: Iterator[list], depth: int) -> Iterator[tuple]:
        """A partition too large to merge: what is merged so far and the rest split again (another seed)."""
        partitions = self._spill(groups, None, seed=depth)
        for batch in rest:
            self._write(batch, partitions, seed=depth)
        yield from self._merge_all(partitions, depth)

    def _absorb(self, groups: dict, state: tuple) -> None:
        width, xp = len(self.group_by), self.ctx.backend.xp
        key = state[:width]
        accumulators = groups.get(key)
        if accumulators is None:
            accumulators = groups[key] = self._new_group()
        for n, accumulator in enumerate(accumulators):
            value = state[width + 2 * n]
            accumulator.absorb(self._on_device(value), state[width + 2 * n + 1], xp)

    def _on_device(self, value):
        """A tile read back from a spill file (host memory) on the backend the query runs on."""
        if self.ctx.backend is NUMPY_BACKEND or not (isinstance(value, np.ndarray) or is_sparse(value)):
            return value
        return self.ctx.backend.asarray(value)

    def _close(self) -> None:
        if self._shared is not None:
            self._shared.close()
        super()._close()

    @staticmethod
    def _feed(call: AggregateCall, backend, canvas=None, shared: Optional[SharedProducts] = None):
        """How one row reaches the call's accumulator: SUM(MATMUL) of CSR tiles adds in place, a placed
        group's first dense product goes into the canvas, a large dense one may be computed by a sibling
        instance (tile_math/product_sum.py), else add()."""
        fused = product_sum_feed(call.function, call.arg, backend, canvas, shared)
        if fused is not None:
            return fused
        if call.arg is None:
            return lambda accumulator, row: accumulator.add(None, backend.xp)
        arg, xp = compile_expr(call.arg, backend), backend.xp
        owned = isinstance(call.arg, bx.Call) and call.arg.function.name in FRESH

        def feed(accumulator: Accumulator, row) -> None:
            value = arg(row)
            if value is not None:  # a NULL (an outer join's missing key) is not counted, as in SQL: COUNT(B.i), AVG
                accumulator.add(value, xp, owned)
        return feed
