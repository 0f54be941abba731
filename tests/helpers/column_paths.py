"""Comparing an operator's column path with its tuple path: the same tuples in the same order."""
from __future__ import annotations

import numpy as np


def same_rows(got: list, expected: list) -> None:
    """The same tuples in the same order: keys (None included) equal, tiles of equal shape, dtype and values."""
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            if isinstance(y, np.ndarray):
                assert type(x) is np.ndarray and x.shape == y.shape and x.dtype == y.dtype, (a, b)
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y and type(x) is type(y), (a, b)


def as_tuples_too(cur, monkeypatch, sql: str) -> tuple[list, list, list]:
    """A query's rows joined as columns, and as a dict join gives them (no column table); and each probe
    batch's size that went as columns."""
    from trdb.execution.tile_math import column_join
    probes, real = [], column_join.ColumnTable.probe

    def watched(self, batch, keys, *fill):
        probes.append(len(batch))
        yield from real(self, batch, keys, *fill)
    monkeypatch.setattr(column_join.ColumnTable, "probe", watched)
    as_columns = cur.execute(sql).fetchall()
    with monkeypatch.context() as patched:
        patched.setattr("trdb.execution.operators.hash_join.build_table", lambda batches, keys: None)
        as_tuples = cur.execute(sql).fetchall()
    return as_columns, as_tuples, probes


def sorted_both_ways(cur, monkeypatch, sql: str) -> tuple[list, list, list]:
    """A query's rows sorted as columns, and as the tuple sort gives them; and each columnar sort's batch count."""
    from trdb.execution.operators import sort
    sorts, real = [], sort.sorted_batches

    def watched(batches, positions, descending, nulls_high=None):
        out = real(batches, positions, descending, nulls_high)
        sorts.append(None if out is None else len(batches))
        return out
    monkeypatch.setattr(sort, "sorted_batches", watched)
    as_columns = cur.execute(sql).fetchall()
    with monkeypatch.context() as patched:
        patched.setattr(sort, "sorted_batches", lambda *args: None)
        as_tuples = cur.execute(sql).fetchall()
    return as_columns, as_tuples, sorts
