"""ORDER BY over column batches: one np.lexsort over the key arrays, the tuples gathered in that order by index arrays.

SortExec sorts a list of tuples by Python's stable sort, key by key from the last (NULLs last ascending,
first descending, equal keys in input order): about a microsecond a tuple, and a tuple built for each.
Where every batch held is a column batch whose sort keys are integer columns (NULL masked, an outer
join's), the same order is one lexsort: for each key, whether it is NULL and its value (bitwise
inverted where descending, which reverses int order without overflow), the first key most
significant; lexsort is stable, as Python's sort is. The batches' columns are joined, per layout (the
tiles of one shape and dtype in each column: edge tiles apart), and handed on as column batches of
consecutive tuples of one layout, each gathered by its index array once.
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence

import numpy as np

from trdb.execution.column_batch import ColumnBatch, batch_rows, columns_row_bytes, is_columns

MAX_RUN_SHARE = 8  # tuples of alternating layouts in fewer than this many a run go as tuples (runs would be tiny)


def sorted_batches(batches: Sequence, positions: Sequence[int], descending: Sequence[bool],
                   nulls_high: Optional[Sequence[bool]] = None) -> Optional[Iterator[ColumnBatch]]:
    """The tuples of `batches` in the order of the keys at `positions` (each ascending or `descending`, its NULLs
    above every value or, where not `nulls_high`, below), as
    column batches; None where a batch is not a column batch, a sort key is not an integer column, or the
    tuples' layouts alternate too often."""
    if not all(is_columns(b, nulls=True) for b in batches) or \
            any(b.is_tile[p] or b.columns[p].dtype.kind not in "iu" or b.columns[p].dtype == np.uint64
                for b in batches for p in positions):
        return None
    groups: dict[tuple, list[ColumnBatch]] = {}
    for batch in batches:
        if len(batch):
            groups.setdefault(_layout(batch), []).append(batch)
    if not groups:
        return iter(())
    joined = [[_concatenated([b.columns[c] for b in group]) for c in range(len(group[0].columns))]
              for group in groups.values()]
    layouts = [group[0].is_tile for group in groups.values()]
    order = _order([[columns[p] for p in positions] for columns in joined], descending,
                   nulls_high or [True] * len(positions))
    sizes = [len(columns[0]) if columns else 0 for columns in joined]
    group_of = np.repeat(np.arange(len(sizes)), sizes)[order]
    row_of = (order - np.repeat(np.cumsum(sizes) - sizes, sizes)[order]) if len(sizes) > 1 else order
    starts = np.flatnonzero(np.r_[True, group_of[1:] != group_of[:-1]]) if len(order) else np.zeros(0, np.int64)
    if len(starts) > max(1, len(order) // MAX_RUN_SHARE):
        return None
    return _runs(joined, layouts, group_of, row_of, starts)


def _runs(joined: list, layouts: list, group_of: np.ndarray, row_of: np.ndarray,
          starts: np.ndarray) -> Iterator[ColumnBatch]:
    """Each run of consecutive tuples of one layout, in batches of at most `batch_rows` tuples."""
    ends = np.r_[starts[1:], len(group_of)]
    for start, end in zip(starts.tolist(), ends.tolist()):
        group = int(group_of[start])
        step = batch_rows(columns_row_bytes(joined[group]))
        for low in range(start, end, step):
            rows = row_of[low:min(end, low + step)]
            yield ColumnBatch([column[rows] for column in joined[group]], layouts[group])


def _order(keys: list[list[np.ndarray]], descending: Sequence[bool], nulls_high: Sequence[bool]) -> np.ndarray:
    """The stable order of the tuples of all groups (one after another) by their sort keys."""
    sort_keys = []
    for k in reversed(range(len(descending))):  # lexsort's last key is the most significant
        arrays = [group[k] for group in keys]
        values = np.concatenate([np.ma.getdata(a).astype(np.int64, copy=False) for a in arrays])
        null = np.concatenate([np.ma.getmaskarray(a) for a in arrays])
        values = np.where(null, 0, values)  # as the tuple sort's (True, 0)
        sort_keys += [~values if descending[k] else values, ~null if nulls_high[k] == descending[k] else null]
    if not sort_keys:
        return np.arange(sum(len(group[0]) if group else 0 for group in keys), dtype=np.int64)
    return np.lexsort(sort_keys)


def _layout(batch: ColumnBatch) -> tuple:
    """What tuples of one group share: each column's kind, dtype, and tile shape."""
    return tuple((tile, column.dtype.str, column.shape[1:] if tile else ())
                 for column, tile in zip(batch.columns, batch.is_tile))


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    if len(arrays) == 1:
        return arrays[0]
    if any(type(a) is np.ma.MaskedArray for a in arrays):
        return np.ma.concatenate(arrays)
    return np.concatenate(arrays)
