"""HashJoinExec: equi-join on keys (inner, left, full); partitioned through spill files (grace) when the build side is big."""
from __future__ import annotations

import math
from functools import cached_property
from typing import Callable, Iterator, Optional

import numpy as np

from trdb.execution.column_batch import ColumnBatch, to_columns
from trdb.execution.exchange.channel import batch_bytes
from trdb.execution.operators.operator import BATCH_SIZE, Batch, PhysicalOperator, batches
from trdb.execution.tile_math.column_join import ColumnTable, build_table, joinable
from trdb.execution.tile_math.compile import compile_predicate
from trdb.execution.tile_math.join_residual import Residual
from trdb.execution.tile_math.key_columns import predicate_function
from trdb.execution.tile_math.outer_columns import MissingColumns, missing_columns
from trdb.kernels.sparse import empty_csr, is_sparse
from trdb.plan.expressions import Bound
from trdb.plan.types import Schema, TensorType
from trdb.storage.spill import SpillFile


class MissingSide:
    """Builds the tuple of a side that has no partner: NULL keys, zero tiles shaped like the partner's."""

    def __init__(self, schema: Schema, partner: Schema, backend):
        self.backend = backend
        self.makers: list[Callable[[tuple], object]] = []
        for column in schema:
            self.makers.append(self._maker(column, partner) if column.is_tensor else (lambda row: None))

    def _maker(self, column, partner: Schema) -> Callable[[tuple], object]:
        dtype, tile = column.type.dtype, column.type.tile
        zeros = self.backend.zeros
        # an edge tile's partner has the edge shape; the zero tile must have it too
        same_tiling = [i for i, c in enumerate(partner) if isinstance(c.type, TensorType) and c.type.tile == tile]
        if same_tiling:
            position = same_tiling[0]
            return lambda row: _zero_like(row[position], dtype, zeros)
        return lambda row: zeros(tile, dtype)

    def __call__(self, partner_row: tuple) -> tuple:
        return tuple(make(partner_row) for make in self.makers)


def _zero_like(partner, dtype, zeros):
    """A zero tile of the partner's shape: an empty CSR tile when the partner is CSR (nothing to allocate)."""
    if is_sparse(partner):
        return empty_csr(tuple(partner.shape), dtype, like=partner)
    return zeros(partner.shape, dtype)


PARTITIONS = 8                # spill files per level of a grace join
MAX_LEVELS = 4                # repartitioning levels; past them a partition is held whatever the budget says
READ_BATCH_BYTES = 1 << 20    # tiles per batch read back from a partition file


def _key_function(positions: tuple[int, ...]) -> Callable[[tuple], tuple]:
    if len(positions) == 1:
        (only,) = positions
        return lambda row: (row[only],)
    return lambda row: tuple(row[p] for p in positions)


def _grace_partition(key: tuple, level: int) -> int:
    """The partition file of a key at a level of a grace join. Not the exchanges' `partition_of`: a
    worker's keys all share their partition_of residue, and would crowd into a few files; the level
    seeds Python's (well mixed, for ints deterministic) tuple hash, so each level splits anew."""
    return hash((level,) + key) % PARTITIONS


def _row_minimum(schema: Schema) -> int:
    """The bytes of one tuple at the nominal tile size: what a join may always hold, however small the budget."""
    return sum(math.prod(c.type.tile) * np.dtype(c.type.dtype).itemsize if c.is_tensor else 8 for c in schema)


class HashJoinExec(PhysicalOperator):
    """Builds a hash table on the right input, probes it with the left.

    The build side reserves its bytes as it grows. When the budget refuses, the join turns into a
    grace hash join: the build tuples, then the probe tuples, go to PARTITIONS spill files by a hash
    of the key, and each pair of files is joined in turn; a partition whose build side still does not
    fit is split again with another hash seed (one level deeper)."""

    def __init__(self, left: PhysicalOperator, right: PhysicalOperator, kind: str,
                 left_keys: tuple[int, ...], right_keys: tuple[int, ...],
                 left_schema: Schema, right_schema: Schema, residual: Optional[Bound] = None):
        super().__init__()
        self.children = (left, right)
        self.kind = kind
        self.left_keys, self.right_keys = left_keys, right_keys
        self.left_schema, self.right_schema = left_schema, right_schema
        self.residual = residual
        self._files: list[SpillFile] = []  # set here, not in _open: close follows an _open stopped part way
        self._output: Optional[Iterator[Batch]] = None

    def _open(self) -> None:
        self._residual = compile_predicate(self.residual, self.ctx.backend) if self.residual is not None else None
        arrays = predicate_function(self.residual) if self.residual is not None else None
        self._column_residual = Residual(arrays, self._residual) if arrays is not None else None
        self._left_key, self._right_key = _key_function(self.left_keys), _key_function(self.right_keys)
        self._memory = self.reservation(_row_minimum(self.right_schema))
        self._null_build: list = []  # a FULL join's build tuples with a NULL key: they meet nothing, and are kept
        table = self._build()
        self._output = self._in_memory(table) if table is not None else self._grace()

    def _next(self) -> Optional[Batch]:
        return next(self._output, None)

    # a side's missing tuples (LEFT and FULL joins), made the first time one is: an inner join makes none
    @cached_property
    def _missing_left(self) -> MissingSide:
        return MissingSide(self.left_schema, self.right_schema, self.ctx.backend)

    @cached_property
    def _missing_right(self) -> MissingSide:
        return MissingSide(self.right_schema, self.left_schema, self.ctx.backend)

    @cached_property
    def _missing_left_columns(self) -> MissingColumns:
        return MissingColumns(self.left_schema, self.right_schema)

    @cached_property
    def _missing_right_columns(self) -> MissingColumns:
        return MissingColumns(self.right_schema, self.left_schema)

    def _close(self) -> None:
        self._output = None
        for spill in self._files:
            spill.remove()
        self._files = []

    # ------------------------------------------------------------ in memory

    def _build(self) -> Optional[dict]:
        """The build side's hash table, or None when the budget refused it (its tuples went to partition files).
        A join whose build side comes as column batches keeps them as columns instead (tile_math/column_join.py):
        `_columns`, probed by whole arrays (a residual condition on keys evaluated on them too); the table is
        then empty."""
        table: dict[tuple, list[tuple]] = {}
        child = self.children[1]
        columns: Optional[list] = [] if self._residual is None or self._column_residual is not None else None
        self._no_build = True  # no build tuple came
        while (batch := child.next_batch()) is not None:
            self._no_build = False
            if not self._memory.try_grow(batch_bytes(batch)):
                self._add_rows(table, columns or [])
                self._partition_build(table, batch)
                return None
            as_columns = to_columns(batch, nulls=True) if columns is not None else None
            if as_columns is not None and joinable(as_columns, self.right_keys):
                columns.append(as_columns)
                continue
            self._add_rows(table, (columns or []) + [batch])
            columns = None
        self._columns = build_table(columns, self.right_keys) if columns else None
        if self._columns is not None and self.kind != "INNER" and \
                not self._missing_right_columns.matches(self._columns.is_tile):
            self._columns = None  # a tensor column not stacked: the missing tuples as MissingSide makes them
        if columns and self._columns is None:
            self._add_rows(table, columns)
        elif self._columns is not None and self.kind == "FULL":
            self._columns.mark_matches()
        self._no_build = self._no_build and columns is not None
        return table

    def _add_rows(self, table: dict, batches: list) -> None:
        right_key, full = self._right_key, self.kind == "FULL"
        for batch in batches:
            for row in batch:
                key = right_key(row)
                if None not in key:
                    table.setdefault(key, []).append(row)
                elif full:  # no probe tuple meets it (NULL equals nothing), but a FULL join keeps it
                    self._null_build.append(row)

    _columns: Optional[ColumnTable] = None
    _no_build = False       # the build side gave no tuple (and would have been columns): probes need no table
    _table_rows: list = []  # the column table's tuples, where a probe batch of tuples needed them as a dict

    def _in_memory(self, table: dict) -> Iterator[Batch]:
        matched: set[int] = set()
        child = self.children[0]
        while (batch := child.next_batch()) is not None:
            if self._columns is not None or self._no_build:
                joined = self._column_probe(batch)
                if joined is not None:
                    yield from joined
                    continue
                if not table and self._columns is not None:  # a probe batch of tuples: the build side as a dict too
                    self._table_rows = self._columns.rows()
                    self._add_rows(table, [self._table_rows])
            for part in _probe_parts(batch):
                out = self._probe(part, table, matched)
                if out:
                    yield out
        if self.kind == "FULL":
            yield from self._full_rest(table, matched)
            yield from batches(self._null_build_rows())

    def _null_build_rows(self) -> list:
        """A FULL join's build tuples with a NULL key, beside the probe side's missing tuple (as PostgreSQL and
        DuckDB keep them)."""
        rows, self._null_build = self._null_build, []
        return [self._missing_left(row) + row for row in rows]

    def _column_probe(self, batch: Batch) -> Optional[Iterator[Batch]]:
        """A probe batch joined by whole arrays (tile_math/column_join.py), or None where it goes tuple by tuple:
        a batch of tuples, or one beside which a missing build tuple's zero tiles would not stack."""
        columns = to_columns(batch, nulls=True)  # a few tuples of a small tensor come as a list
        if columns is None or not joinable(columns, self.left_keys, null_keys=True):
            return None
        fill = None
        if self.kind != "INNER":
            missing = self._missing_right_columns
            like = self._columns.columns if self._columns is not None else None
            fill = missing.fill(columns.columns, like) if missing.matches(columns.is_tile, partner=True) else None
            if fill is None:
                return None
        if self._columns is not None:
            return self._columns.probe(columns, self.left_keys, fill, self._column_residual)
        if fill is None:  # an inner join with no build tuple
            return iter(())
        return iter([ColumnBatch(list(columns.columns) + missing_columns(len(columns), fill),
                                 columns.is_tile + tuple(zero is not None for zero in fill))])

    def _full_rest(self, table: dict, matched: set) -> Iterator[Batch]:
        """A FULL join's build tuples no probe tuple met, beside the probe side's missing tuple."""
        if self._columns is None:
            yield from batches(self._unmatched_right(table, matched))
            return
        if table:  # some probe batches met the tuples of the dict
            self._columns.matched |= np.fromiter((id(row) in matched for row in self._table_rows), bool,
                                                 len(self._table_rows))
        yield from self._columns.unmatched(self._missing_left_columns.fill(self._columns.columns))

    def _probe(self, batch: Batch, table: dict, matched: set) -> Batch:
        out = []
        left_key, residual, kind = self._left_key, self._residual, self.kind
        for row in batch:
            partners = table.get(left_key(row), ())
            joined = [row + partner for partner in partners]
            if residual is not None:
                joined = [r for r in joined if residual(r)]
            if kind == "FULL":
                matched.update(id(p) for p in partners)
            if not joined and kind in ("LEFT", "FULL"):
                joined = [row + self._missing_right(row)]
            out.extend(joined)
        return out

    def _unmatched_right(self, table: dict, matched: set) -> list:
        return [self._missing_left(row) + row for rows in table.values() for row in rows if id(row) not in matched]

    # ------------------------------------------------------------ grace

    def _partition_build(self, table: dict, refused: Batch) -> None:
        """The tuples held so far, the refused batch and the rest of the build side, into partition files."""
        self._build_files = self._new_files("join-build")
        held = [row for rows in table.values() for row in rows]
        table.clear()
        self._memory.release_all()
        self._write_build(held)
        self._write_build(refused)
        while (batch := self.children[1].next_batch()) is not None:
            self._write_build(batch)
        for spill in self._build_files:
            spill.finish()

    def _write_build(self, rows: list) -> None:
        no_key = self._write_partitioned(self._build_files, rows, self._right_key, 1)
        if self.kind == "FULL":
            self._null_build.extend(no_key)

    def _grace(self) -> Iterator[Batch]:
        probe_files = self._new_files("join-probe")
        while (batch := self.children[0].next_batch()) is not None:
            # a NULL key has no partner: such a tuple is answered now, not spilled
            no_key = self._write_partitioned(probe_files, batch, self._left_key, 1)
            if no_key and self.kind in ("LEFT", "FULL"):
                yield [row + self._missing_right(row) for row in no_key]
        for spill in probe_files:
            spill.finish()
        yield from self._join_partitions(self._build_files, probe_files, 1)
        if self.kind == "FULL":
            yield from batches(self._null_build_rows())

    def _join_partitions(self, builds: list[SpillFile], probes: list[SpillFile], level: int) -> Iterator[Batch]:
        for build, probe in zip(builds, probes):
            self.ctx.check_cancelled()
            if probe.rows or (build.rows and self.kind == "FULL"):
                yield from self._join_partition(build, probe, level)
            build.remove()
            probe.remove()

    def _join_partition(self, build: SpillFile, probe: SpillFile, level: int) -> Iterator[Batch]:
        # a partition of a few tuples is held whatever the budget: splitting it further gains nothing
        forced = level > MAX_LEVELS or build.bytes <= PARTITIONS * self._memory.minimum
        table, held = self._load(build, forced)
        if table is None:
            yield from self._repartitioned(build, probe, level + 1)
            return
        matched: set[int] = set()
        for batch in probe.batches(READ_BATCH_BYTES):
            out = self._probe(batch, table, matched)
            if out:
                yield out
        if self.kind == "FULL":
            yield from batches(self._unmatched_right(table, matched))
        self._memory.shrink(held)

    def _load(self, build: SpillFile, forced: bool) -> tuple[Optional[dict], int]:
        """A partition's hash table and the bytes it holds; (None, 0) when the budget refuses it."""
        table: dict[tuple, list[tuple]] = {}
        held, right_key = 0, self._right_key
        for batch in build.batches(READ_BATCH_BYTES):
            size = batch_bytes(batch)
            if forced:
                self._memory.grow(size)
            elif not self._memory.try_grow(size):
                self._memory.shrink(held)
                return None, 0
            held += size
            for row in batch:
                table.setdefault(right_key(row), []).append(row)
        return table, held

    def _repartitioned(self, build: SpillFile, probe: SpillFile, level: int) -> Iterator[Batch]:
        """A partition too large for the budget, split by another hash of its keys and joined part by part."""
        builds = self._split(build, self._right_key, level, "join-build")
        if max(spill.rows for spill in builds) == build.rows:
            # every tuple went to one part: one key holds them all, and no hash will split it
            for spill in builds:
                spill.remove()
            yield from self._join_partition(build, probe, MAX_LEVELS + 1)
            return
        probes = self._split(probe, self._left_key, level, "join-probe")
        yield from self._join_partitions(builds, probes, level)

    def _split(self, source: SpillFile, key: Callable[[tuple], tuple], level: int, purpose: str) -> list[SpillFile]:
        parts = self._new_files(purpose)
        for batch in source.batches(READ_BATCH_BYTES):
            self.ctx.check_cancelled()
            self._write_partitioned(parts, batch, key, level)
        for spill in parts:
            spill.finish()
        return parts

    def _write_partitioned(self, files: list[SpillFile], rows: list, key: Callable[[tuple], tuple],
                           level: int) -> list:
        """Each tuple to the file of its key's hash at `level` (the level seeds the hash); returns those with a NULL key."""
        parts: list[list] = [[] for _ in files]
        no_key = []
        for row in rows:
            value = key(row)
            if None in value:
                no_key.append(row)
            else:
                parts[_grace_partition(value, level)].append(row)
        for spill, part in zip(files, parts):
            if part:
                self._memory.note_spilled(spill.write(part))
        return no_key

    def _new_files(self, purpose: str) -> list[SpillFile]:
        files = [self.ctx.spill_file(purpose) for _ in range(PARTITIONS)]
        self._files.extend(files)
        return files


def _probe_parts(batch: Batch) -> Iterator[Batch]:
    """A probe batch in parts of BATCH_SIZE tuples: a column batch holds up to thousands, and each tuple may
    meet many partners (a cross join), so that the join's output, and the cancellation checks between its
    batches, keep a list batch's pace."""
    if len(batch) <= BATCH_SIZE:
        yield batch
        return
    for start in range(0, len(batch), BATCH_SIZE):
        yield batch[start:start + BATCH_SIZE]
