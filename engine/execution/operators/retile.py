"""RetileExec: gathers a tensor relation's tiles and re-cuts them to a new tile shape (a piece of a present tile is present).

With several workers every instance receives every input tile (a broadcast: references, no copies
in this process) and cuts only the new tiles of its own partition (the hash of their keys, as a
repartition would place them), so the copying is shared among the workers.

Dense tiles that fill their grid are moved as whole arrays (tile_math/dense_retile.py); other dense tiles are
copied overlap by overlap; when CSR tiles are among the input, the non-zeros of
every tile are gathered as coordinates and bucketed into the new tiles instead, which are built
CSR or dense as their density says, so a sparse matrix is never densified on the way.

When its reservation is refused, the tiles held are written, in key order, as a sorted run; at the
end the runs are merged and the new tiles are cut one new tile row at a time, holding only the old
tiles that overlap that row.
"""
from __future__ import annotations

import itertools
from typing import Iterable, Iterator, Optional

import numpy as np

from trdb.execution.column_batch import is_columns
from trdb.execution.exchange.channel import batch_bytes
from trdb.execution.exchange.partitioning import partition_of
from trdb.execution.operators.operator import Batches, BlockingOperator, PhysicalOperator, batches
from trdb.execution.operators.sort import merge_runs, on_backend, write_run
from trdb.execution.tile_math.dense_retile import retiled, stacked_parts
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse, make_csr, nbytes, row_indices, to_host, wants_csr
from trdb.storage.key_hash import key_hash_array
from trdb.storage.tile_runs import tile_views


class RetileExec(BlockingOperator):
    """Input tuples: `key_count` keys, then the tile; output: one key per tile axis, then the new tile.

    `old_tile` is the input's nominal tile (keys map to its leading axes; an axis without a key is
    one tile from offset 0); `extent` is the logical shape, None where unknown (then the data's).
    """

    def __init__(self, child: PhysicalOperator, key_count: int, old_tile: tuple[int, ...],
                 new_tile: tuple[int, ...], extent: tuple[Optional[int], ...], dtype,
                 partition: int = 0, partitions: int = 1):
        super().__init__()
        self.partition = partition
        self.partitions = partitions
        self.children = (child,)
        self.key_count = key_count
        self.old_tile = old_tile
        self.new_tile = new_tile
        self.extent = extent
        self.dtype = dtype

    def _compute(self) -> Iterable[tuple]:
        self._memory = memory = self.reservation()
        tiles, runs, seen = {}, [], None  # seen: (extent, any CSR) of the tiles spilled so far
        stacks: Optional[list] = []  # while every batch is a column batch: (keys, stack) pairs, no tuple made
        child = self.children[0]
        while (batch := child.next_batch()) is not None:
            if stacks is not None and is_columns(batch) and batch.is_tile[self.key_count]:
                stacks.append(self._keyed_stack(batch))
            else:
                self._unstack(tiles, stacks)
                stacks = None
                for row in batch:
                    tiles[self._padded(row[:self.key_count])] = row[self.key_count]
            size = batch_bytes(batch)
            if memory.try_grow(size):
                continue
            if not self.key_count:
                memory.grow(size)  # one tile in all: nothing to spill
                continue
            self._unstack(tiles, stacks)
            stacks = None
            seen = self._spill_run(tiles, runs, seen)
        if not runs:
            cut = self._whole(tiles, stacks)
            if cut is not None:
                stacked, rows = cut
                return Batches([*stacked, *batches(rows)])
            self._unstack(tiles, stacks)
            if not tiles:
                return []
            return self._retile(tiles, self._extent(tiles), any(is_sparse(t) for t in tiles.values()))
        extent, sparse = self._spill_run(tiles, runs, seen)
        merged = merge_runs(runs, lambda row: row[:-1], self.spill_file, memory)
        return self._retile_rows(on_backend(self.ctx.backend, merged), extent, sparse)

    def _padded(self, key: tuple) -> tuple:
        """An input key with 0 for each tile axis it has no key for."""
        return tuple(key) + (0,) * (len(self.new_tile) - self.key_count)

    def _keyed_stack(self, batch) -> tuple[np.ndarray, np.ndarray]:
        """A column batch's keys (padded, n x d) and its stack of tiles."""
        keys = np.zeros((len(batch), len(self.new_tile)), dtype=np.int64)
        for axis in range(self.key_count):
            keys[:, axis] = batch.columns[axis]
        return keys, batch.columns[self.key_count]

    def _unstack(self, tiles: dict, stacks: Optional[list]) -> None:
        """The stacks held, as tiles under their keys (in the order they came: a later tile under a key replaces it)."""
        for keys, stack in stacks or ():
            tiles.update(zip(map(tuple, keys.tolist()), tile_views(stack)))
        if stacks:
            stacks.clear()

    def _whole(self, tiles: dict, stacks: Optional[list]) -> Optional[tuple]:
        """The new tiles cut as whole arrays (tile_math/dense_retile.py), or None where that does not apply."""
        if self.ctx.backend is not NUMPY_BACKEND or not (tiles or stacks):
            return None
        parts = stacks if stacks else stacked_parts(tiles)
        if not parts or not all(len(stack) for _, stack in parts):
            return None
        sample = parts[0][1][0]
        mine = None if self.partitions == 1 else \
            (lambda new: key_hash_array(new) % self.partitions == self.partition)
        extent = self._extent_of(parts)
        return retiled(parts, self._old(sample), self.new_tile, extent, self.dtype, self._memory.try_grow, mine)

    def _extent_of(self, parts: list) -> tuple[int, ...]:
        """`_extent` of tiles held as (keys, stack) parts."""
        extent = list(self.extent)
        for axis, known in enumerate(extent):
            if known is None:
                extent[axis] = max(int(keys[:, axis].max()) * self._old(stack[0])[axis] + stack.shape[axis + 1]
                                   for keys, stack in parts)
        return tuple(extent)

    def _retile(self, tiles: dict, extent: tuple, sparse: bool, row: Optional[int] = None) -> list:
        """The new tiles cut from `tiles` (those in new tile row `row` only, if given), in key order."""
        if sparse:
            return self._retile_entries(tiles, extent, row)
        xp = self.ctx.backend.xp
        cut = ((new, self._cut(new, tiles, extent, xp)) for new in sorted(self._wanted(tiles, row)))
        return [new + (tile,) for new, tile in cut]  # a piece of present tiles is present, zeros too

    def _wanted(self, tiles: dict, row: Optional[int]) -> set:
        """The keys of the new tiles the old tiles overlap (in new tile row `row`, if given) that are this instance's."""
        wanted = set()
        for key, tile in tiles.items():
            ranges = [range(k * t // n, max(k * t, k * t + s - 1) // n + 1)
                      for k, t, n, s in zip(key, self._old(tile), self.new_tile, tile.shape)]
            if row is not None:
                ranges[0] = range(row, row + 1) if row in ranges[0] else range(0)
            wanted.update(key for key in itertools.product(*ranges) if self._mine(key))
        return wanted

    # ---------------------------------------------------------------- spilling

    def _spill_run(self, tiles: dict, runs: list, seen: Optional[tuple]) -> tuple:
        """Write the tiles held, in key order, as one more run; returns what is known of all tiles spilled:
        the extent (where unknown: the largest seen) and whether any is CSR."""
        extent = self._extent(tiles) if tiles else tuple(e or 0 for e in self.extent)
        sparse = any(is_sparse(t) for t in tiles.values())
        if seen is not None:
            extent, sparse = tuple(map(max, extent, seen[0])), sparse or seen[1]
        runs.append(write_run(self.spill_file, self._memory, (key + (tiles[key],) for key in sorted(tiles))))
        tiles.clear()
        self._memory.release_all()
        return extent, sparse

    def _retile_rows(self, rows: Iterator[tuple], extent: tuple, sparse: bool) -> Iterator[tuple]:
        """The new tiles, one new tile row at a time, from old tiles in key order: only the old tiles
        that overlap the current row are held (a window moving down the first axis)."""
        window: dict[tuple, object] = {}
        pending, row = next(rows, None), 0
        while pending is not None or window:
            if not window:
                row = self._rows_of(pending[:-1], pending[-1]).start
            while pending is not None and self._rows_of(pending[:-1], pending[-1]).start <= row:
                self._hold(window, pending[:-1], pending[-1])
                pending = next(rows, None)
            yield from self._retile(window, extent, sparse, row)
            for key in [k for k, t in window.items() if self._rows_of(k, t).stop <= row + 1]:
                self._memory.shrink(nbytes(window.pop(key)))
            row += 1

    def _hold(self, window: dict, key: tuple, tile) -> None:
        """An old tile joins the window (the working set: held whatever the budget says)."""
        if key in window:
            self._memory.shrink(nbytes(window[key]))  # a later tile under one key replaces it, as in memory
        window[key] = tile
        self._memory.grow(nbytes(tile))

    def _rows_of(self, key: tuple, tile) -> range:
        """The new tile rows (first axis) an old tile overlaps."""
        k, t, n, s = key[0], self._old(tile)[0], self.new_tile[0], tile.shape[0]
        return range(k * t // n, max(k * t, k * t + s - 1) // n + 1)

    def _mine(self, key: tuple) -> bool:
        """Whether the new tile under `key` is this instance's to cut."""
        return self.partitions == 1 or partition_of(key, self.partitions) == self.partition

    def _old(self, tile) -> tuple[int, ...]:
        """The nominal old tile per axis (an axis without a key is one whole tile)."""
        return tuple(t if axis < self.key_count else s for axis, (t, s) in enumerate(zip(self.old_tile, tile.shape)))

    def _extent(self, tiles: dict) -> tuple[int, ...]:
        extent = list(self.extent)
        for axis, known in enumerate(extent):
            if known is None:
                extent[axis] = max(k[axis] * self._old(t)[axis] + t.shape[axis] for k, t in tiles.items())
        return tuple(extent)

    def _cut(self, new: tuple, tiles: dict, extent: tuple, xp):
        """The new tile at key `new`: every overlapping old tile's overlap copied into zeros."""
        starts = [k * n for k, n in zip(new, self.new_tile)]
        stops = [min(s + n, e) for s, n, e in zip(starts, self.new_tile, extent)]
        out = xp.zeros(tuple(b - a for a, b in zip(starts, stops)), dtype=self.dtype)
        sample = next(iter(tiles.values()))
        old = self._old(sample)
        ranges = [range(a // t, (b - 1) // t + 1) if axis < self.key_count else range(1)
                  for axis, (a, b, t) in enumerate(zip(starts, stops, old))]
        for key in itertools.product(*ranges):
            tile = tiles.get(key)
            if tile is None:
                continue
            origin = [k * t for k, t in zip(key, self._old(tile))]
            lo = [max(a, o) for a, o in zip(starts, origin)]
            hi = [min(b, o + s) for b, o, s in zip(stops, origin, tile.shape)]
            if any(h <= l for l, h in zip(lo, hi)):
                continue
            out[tuple(slice(l - a, h - a) for l, h, a in zip(lo, hi, starts))] = \
                tile[tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, origin))]
        return out

    def _retile_entries(self, tiles: dict, extent: tuple, row: Optional[int] = None) -> list:
        """The new tiles of 2-d input holding CSR tiles: non-zeros gathered, sorted by new tile and position."""
        rows, cols, values = self._entries(tiles)
        if row is not None:
            kept = rows // self.new_tile[0] == row
            rows, cols, values = rows[kept], cols[kept], values[kept]
        keys = [rows // self.new_tile[0], cols // self.new_tile[1]]
        local = [rows % self.new_tile[0], cols % self.new_tile[1]]
        order = np.lexsort([local[1], local[0], keys[1], keys[0]])
        keys, local, values = [k[order] for k in keys], [p[order] for p in local], values[order]
        change = np.ones(len(values), dtype=bool)
        change[1:] = (keys[0][1:] != keys[0][:-1]) | (keys[1][1:] != keys[1][:-1])
        bounds = [*np.flatnonzero(change).tolist(), len(values)]
        asarray = self.ctx.backend.asarray
        out = []
        for start, end in zip(bounds[:-1], bounds[1:]):
            key = (int(keys[0][start]), int(keys[1][start]))
            if not self._mine(key):
                continue
            shape = tuple(min(n, e - k * n) for k, n, e in zip(key, self.new_tile, extent))
            tile = self._build(shape, local[0][start:end], local[1][start:end], values[start:end])
            out.append(key + (asarray(tile),))
        return out

    def _entries(self, tiles: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Global (row, column, value) of every non-zero of the input tiles."""
        parts = []
        for key, tile in tiles.items():
            r0, c0 = (k * t for k, t in zip(key, self._old(tile)))
            tile = to_host(tile)
            if is_sparse(tile):
                kept = tile.data != 0
                rows, cols = row_indices(tile).astype(np.int64), tile.indices.astype(np.int64)
                parts.append((rows[kept] + r0, cols[kept] + c0, tile.data[kept]))
            else:
                tile = np.asarray(self.ctx.backend.to_numpy(tile))
                r, c = np.nonzero(tile)
                parts.append((r + r0, c + c0, tile[r, c]))
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))

    def _build(self, shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, values: np.ndarray):
        """One new tile from its entries in row-major order: CSR when sparse enough, else dense."""
        values = values.astype(self.dtype, copy=False)
        if wants_csr(shape, len(values), self.dtype):
            indptr = np.zeros(shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
            return make_csr(values, cols.astype(np.int32), indptr.astype(np.int32), shape)
        tile = np.zeros(shape, dtype=self.dtype)
        tile[rows, cols] = values
        return tile
