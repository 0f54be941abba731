"""SUMMARIZE tensor (or view, or query): one row per column as DuckDB's SUMMARIZE, plus tiles, non-zeros, density.

A key's row describes the keys of the stored tiles (range, distinct values, mean). The value's row
describes every element of the tensor, absent tiles counted as the zeros they stand for, so its
mean is numpy's mean of the dense tensor. Tiles are read a bounded batch at a time: a tensor larger
than memory is summarized without being held, and the per-tile statistics are combined exactly
(Chan's parallel formula for the variance).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from trdb.execution.result import Result
from trdb.execution.spool import row_batches
from trdb.ingest.tiling import CHUNK_BYTES
from trdb.kernels.backend import to_host
from trdb.kernels.distinct import distinct
from trdb.kernels.sparse import count_nonzero, dense
from trdb.parser import ast
from trdb.plan.types import Column, OtherType, ScalarType
from trdb.statements.context import StatementContext
from trdb.statements.names import does_not_exist
from trdb.storage.tensor_meta import TensorMeta

NAMES = ("column_name", "column_type", "min", "max", "approx_unique", "avg", "std", "count", "tuples",
         "nonzeros", "density")
TYPES = (OtherType("VARCHAR"), OtherType("VARCHAR"), *(ScalarType(float),) * 2, ScalarType(int),
         *(ScalarType(float),) * 2, *(ScalarType(int),) * 3, ScalarType(float))


@dataclass
class Moments:
    """Count, mean and sum of squared deviations of the elements seen so far, with their range."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def add(self, count: int, mean: float, m2: float, low: float, high: float) -> None:
        if count == 0:
            return
        total = self.count + count
        delta = mean - self.mean
        self.mean += delta * count / total
        self.m2 += m2 + delta * delta * self.count * count / total
        self.count = total
        self.low, self.high = min(self.low, low), max(self.high, high)

    def add_tile(self, tile: np.ndarray) -> None:
        values = np.asarray(tile, dtype=np.float64).ravel()
        if values.size:
            mean = float(values.mean())
            self.add(values.size, mean, float(np.square(values - mean).sum()), float(values.min()),
                     float(values.max()))

    def std(self) -> Optional[float]:
        """The sample standard deviation, as DuckDB's SUMMARIZE (stddev_samp) gives it."""
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else None


def summarize(sc: StatementContext, node: ast.Summarize) -> Result:
    meta = sc.catalog.tensor(node.name)
    external = meta is not None and meta.external  # no index of stored tiles: summarized as its scan's result
    if external or (meta is None and sc.catalog.view(node.name) is not None):
        return _summarize_result(sc.run_plan(sc.bind_table(ast.TableRef(node.name, span=node.span))))
    if meta is None:
        raise does_not_exist(sc.catalog, "tensor", node.name)
    index, sizes = sc.catalog.tile_index(meta)
    rows = [_key_row(name, index.keys[:, axis]) for axis, name in enumerate(meta.keys)]
    rows.append(_value_row(meta, _value_moments(sc, meta, index, sizes), index))
    schema = tuple(Column(n, t) for n, t in zip(NAMES, TYPES))
    return Result(rows=rows, schema=schema, rowcount=len(rows))


def summarize_query(sc: StatementContext, node: ast.SummarizeQuery) -> Result:
    """SUMMARIZE query (as DuckDB's SUMMARIZE SELECT ...): the query runs and its result is summarized."""
    return _summarize_result(sc.run_query(node.query))


def _summarize_result(result: Result) -> Result:
    """Every column of a query's result: keys as stored keys, tensor columns over their tiles plus, where the
    result is one tensor of known extent (a key per tile axis), the absent tiles' zeros."""
    columns = list(result.schema)
    keys = [[] for _ in columns]
    moments = [Moments() for _ in columns]
    nonzeros = [0] * len(columns)
    tuples = 0
    for batch in row_batches(result.rows):
        tuples += len(batch)
        for position, column in enumerate(columns):
            for row in batch:
                if column.is_tensor:
                    tile = dense(to_host(row[position]))
                    moments[position].add_tile(tile)
                    nonzeros[position] += count_nonzero(tile)
                elif row[position] is not None:
                    keys[position].append(row[position])
    key_count = sum(1 for c in columns if c.is_key)
    rows = []
    for position, column in enumerate(columns):
        if not column.is_tensor:
            rows.append((column.name, str(column.type), *_key_row(column.name, np.asarray(keys[position]))[2:]))
            continue
        extent, stats = column.type.extent, moments[position]
        whole = math.prod(extent) if None not in extent and key_count == len(column.type.tile) else stats.count
        stats.add(max(0, whole - stats.count), 0.0, 0.0, 0.0, 0.0)
        rows.append((column.name, str(column.type), stats.low, stats.high, None, stats.mean, stats.std(),
                     stats.count, tuples, nonzeros[position], nonzeros[position] / stats.count if stats.count else None))
    schema = tuple(Column(n, t) for n, t in zip(NAMES, TYPES))
    result.close()
    return Result(rows=rows, schema=schema, rowcount=len(rows))


def _key_row(name: str, keys: np.ndarray) -> tuple:
    if len(keys) == 0:
        return (name, "BIGINT", None, None, 0, None, None, 0, 0, None, None)
    std = float(keys.std(ddof=1)) if len(keys) > 1 else None
    return (name, "BIGINT", float(keys.min()), float(keys.max()), len(distinct(keys)), float(keys.mean()), std,
            len(keys), len(keys), None, None)


def _value_moments(sc: StatementContext, meta: TensorMeta, index, sizes: np.ndarray) -> Moments:
    moments = Moments()
    start = 0
    while start < len(sizes):
        stop = start + 1
        budget = int(sizes[start])
        while stop < len(sizes) and budget + int(sizes[stop]) <= CHUNK_BYTES:
            budget += int(sizes[stop])
            stop += 1
        for tile in sc.catalog.tile_rows(meta, index, start, stop)[1]:
            moments.add_tile(dense(tile))
        start = stop
    absent = math.prod(meta.shape) - moments.count  # absent tiles are zeros
    moments.add(absent, 0.0, 0.0, 0.0, 0.0)
    return moments


def _value_row(meta: TensorMeta, moments: Moments, index) -> tuple:
    nonzeros = int(index.nonzeros.sum())
    elements = math.prod(meta.shape)
    return (meta.value_name, f"TENSOR({meta.dtype.name})", moments.low, moments.high, None, moments.mean,
            moments.std(), elements, len(index.keys), nonzeros, nonzeros / elements if elements else None)
