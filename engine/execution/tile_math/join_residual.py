"""A join's residual condition on keys (`ON A.i = B.i AND A.j >= B.j`) over the pairs a column join meets: one
array evaluation a part of the probe, as the dict join tests each joined tuple.

The dict join meets a probe tuple's partners by the equi-keys, keeps the joined tuples the residual
condition holds for, and, in a LEFT or FULL join, hands on a probe tuple none of whose partners it keeps
once with the missing tuple (a FULL join counts every partner met by key as matched, whatever the
condition said). Over column batches the same is done on the index arrays of the pairs: the condition
(tile_math/key_columns.py) is evaluated over the pairs' key columns alone (tiles are not gathered for
pairs it drops), and the pairs it keeps, with one missing pair for each probe tuple left without, are
gathered in the probe's order. A condition the arrays cannot answer for a part (a division by zero)
is tested tuple by tuple over its key columns, which raises the error the dict join raises.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from trdb.execution.column_batch import ColumnBatch
from trdb.execution.tile_math.outer_columns import take_or_missing


class Residual(NamedTuple):
    """A residual condition on keys: over a column batch's arrays (None where they cannot answer), and per tuple."""

    arrays: Callable[[ColumnBatch], Optional[np.ndarray]]
    test: Callable[[tuple], bool]


def kept_pairs(batch: ColumnBatch, build_columns: Sequence[np.ndarray], build_is_tile: tuple,
               probe_rows: np.ndarray, build_rows: np.ndarray, residual: Residual,
               outer: bool) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (probe row, build row; -1: the missing tuple, kept as it is) whose joined tuple the condition
    keeps, in the probe's order; with `outer`, one missing pair for each probe row whose pairs it all drops."""
    met = np.flatnonzero(build_rows >= 0)
    holds = _holds(batch, build_columns, build_is_tile, probe_rows[met], build_rows[met], residual)
    keep = np.ones(len(build_rows), dtype=bool)
    keep[met] = holds
    kept_probe, kept_build = probe_rows[keep], build_rows[keep]
    if not outer:
        return kept_probe, kept_build
    lost = np.setdiff1d(probe_rows[met], probe_rows[met[holds]])  # met by key, kept by none
    if not len(lost):
        return kept_probe, kept_build
    probe = np.concatenate([kept_probe, lost])
    order = np.argsort(probe, kind="stable")  # a lost row has no kept pair: it lands where its pairs were
    return probe[order], np.concatenate([kept_build, np.full(len(lost), -1, dtype=np.int64)])[order]


def _holds(batch: ColumnBatch, build_columns: Sequence[np.ndarray], build_is_tile: tuple,
           probe_rows: np.ndarray, build_rows: np.ndarray, residual: Residual) -> np.ndarray:
    """Whether the condition holds for each pair, from the pairs' key columns (tile columns left empty)."""
    rows = len(probe_rows)
    columns = [np.empty((rows, 0), np.int8) if tile else c[probe_rows] for c, tile in zip(batch.columns, batch.is_tile)]
    columns += [np.empty((rows, 0), np.int8) if tile else take_or_missing(c, build_rows, None)
                for c, tile in zip(build_columns, build_is_tile)]
    keys = ColumnBatch(columns, batch.is_tile + build_is_tile)
    holds = residual.arrays(keys)
    if holds is None:
        holds = np.fromiter((residual.test(row) for row in keys), dtype=bool, count=rows)
    return holds
