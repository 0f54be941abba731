"""A MINIMIZE step's writes: new tiles of parameters and Adam's moments, their statistics saved together."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from trdb.ingest.tiling import CHUNK_BYTES
from trdb.kernels.sparse import dense
from trdb.statements.context import StatementContext
from trdb.storage import small_tiles, tile_store
from trdb.storage.adam_state import write_adam_steps
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_writer import TileWriter


def tiles_by_key(sc: StatementContext, meta: TensorMeta) -> dict[tuple, np.ndarray]:
    keys, tiles = sc.catalog.tiles(sc.catalog.require_tensor(meta.name))
    return {tuple(k): dense(t) for k, t in zip(keys.tolist(), tiles)}  # updates fill CSR tiles in


@dataclass
class Written:
    """A tensor a step wrote, whose statistics and kept tiles wait for the step's other writes (one catalog
    UPDATE for them all): `counted` the writer's statistics where it wrote the tensor whole, else None."""
    meta: TensorMeta
    counted: Optional[tuple]
    keys: np.ndarray
    kept: Optional[list]
    overwrite: Optional[tile_store.Overwrite] = None  # a tile written over by `finish_writes`, with the others


def replace_tiles(sc: StatementContext, meta: TensorMeta, keys: list[tuple], tiles: list[np.ndarray],
                   whole: bool = False) -> Written:
    """Write `tiles` under `keys` in place of the stored ones; `whole`: `keys` cover every stored tile
    (the tensor is written afresh, with no DELETE of each key). `finish_writes` completes the write."""
    meta = sc.catalog.require_tensor(meta.name)
    key_array = np.array(keys, dtype=np.int64).reshape(len(keys), len(meta.keys))
    over = small_tiles.is_small(meta.table) and len(tiles) > 0  # its one tile written over (small_tiles.py)
    if not over:
        tile_store.delete_tiles(sc.db, meta, None if whole else key_array)
    # the buffer pool will keep the new tensor, if it is small enough: the next step reads nothing back
    kept: Optional[list] = [] if whole and sc.catalog.pool.would_keep(
        sum(np.size(tile) for tile in tiles) * meta.dtype.itemsize) else None
    with TileWriter(sc.db, meta, CHUNK_BYTES, overwrite=over) as writer:  # a batch at a time, each cast as it goes in
        writer.add_cast(keys, tiles, meta.dtype, kept)
    written = writer.statistics
    if kept is not None and (written.tuples != len(kept) or written.csr_tuples):
        kept = None  # a tile stored CSR (or skipped, all zeros): a read would not give them as they are here
    return Written(meta, written.as_tuple() if whole else None, key_array, kept)


def replace_stack(sc: StatementContext, meta: TensorMeta, keys: np.ndarray, stack: np.ndarray,
                   stored: bool) -> Written:
    """`replace_tiles` of every tile, as one stack `(n, *tile)` (cast to the tensor's dtype) under `keys`;
    `stored`: those are the keys stored now (one tile is then written over in place where it can be)."""
    meta = sc.catalog.require_tensor(meta.name)
    stack = np.ascontiguousarray(stack, dtype=meta.dtype)
    written = tile_store.WrittenStatistics(len(meta.keys), meta.grid)
    overwrite = tile_store.planned_overwrite(sc.db, meta, keys, stack, written) if stored else None
    if overwrite is None:
        tile_store.delete_tiles(sc.db, meta, None)
        with TileWriter(sc.db, meta, CHUNK_BYTES) as writer:
            writer.add_stack(keys, stack)
        written = writer.statistics
    keep = sc.catalog.pool.would_keep(stack.nbytes) and written.tuples == len(stack) and not written.csr_tuples
    return Written(meta, written.as_tuple(), keys, stack if keep else None, overwrite)


def finish_writes(sc: StatementContext, writes: list[Written], adam_steps: Optional[dict[str, int]] = None) -> None:
    """The tiles the step writes over are written (small tensors' in one UPDATE); the step's written tensors
    get their statistics and new data versions, whole ones in one UPDATE; the buffer pool keeps what they
    wrote where it can. `adam_steps`: the step counts of Adam's parameters, set with the data versions where
    the parameter is among the tensors written whole (else by a statement of their own)."""
    tile_store.write_overwrites(sc.db, [w.overwrite for w in writes if w.overwrite is not None])
    counted = [w for w in writes if w.counted is not None]
    steps = dict(adam_steps or {})
    names = {w.meta.name for w in counted}
    alone = {param: step for param, step in steps.items() if param not in names}
    write_adam_steps(sc.db, alone)
    steps = {param: step for param, step in steps.items() if param in names}
    metas = sc.catalog.refresh_statistics_of([(w.meta, w.counted) for w in counted], steps) if counted else []
    for write, meta in zip(counted, metas):
        if write.kept is not None:
            sc.catalog.keep_written(meta, write.keys, write.kept)  # every tile stored dense: as a read gives them
    for write in writes:
        if write.counted is None:
            sc.catalog.refresh_statistics(write.meta)
