"""The hash that places a key tuple in a partition, computed alike in Python and in DuckDB's SQL.

Scans push it into the WHERE of their reads, so that each worker reads only its own tiles, and
exchanges route tuples with it, so that the two agree on where every key lives. It is a
polynomial in the key ints modulo a prime: every intermediate product fits a BIGINT, and the
multiplier (about the prime over the golden ratio) spreads rows, columns and diagonals of a tile
grid evenly over any small number of partitions.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

PRIME = 2_147_483_647         # 2**31 - 1: a hash below it times the multiplier stays below 2**62
MULTIPLIER = 1_327_217_885    # near PRIME / 1.618: consecutive keys of one axis land far apart


def key_hash(key: Iterable) -> int:
    """The hash of a key tuple of ints; None (an outer join's missing key) hashes as 0."""
    value = 0
    for part in key:
        value = (value * MULTIPLIER + (part or 0)) % PRIME
    return value


def key_hash_sql(columns: Sequence[str]) -> str:
    """The same hash as a DuckDB expression over BIGINT columns (SQL's % keeps the dividend's sign)."""
    value = "0"
    for column in columns:
        residue = f"(({column} % {PRIME}) + {PRIME}) % {PRIME}"
        value = residue if value == "0" else f"(({value}) * {MULTIPLIER} + {residue}) % {PRIME}"
    return value


def partition_sql(columns: Sequence[str], partitions: int, partition: int) -> str:
    """A WHERE condition true for the rows whose key hash (on `columns`) falls in `partition`."""
    return f"({key_hash_sql(columns)}) % {int(partitions)} = {int(partition)}"


def key_hash_array(keys: np.ndarray) -> np.ndarray:
    """`key_hash` of every row of an n x m int64 array at once (numpy: the intermediate values fit an int64)."""
    keys = np.asarray(keys, dtype=np.int64)
    value = np.zeros(len(keys), dtype=np.int64)
    for column in range(keys.shape[1] if keys.ndim == 2 else 0):
        value = (value * MULTIPLIER + np.mod(keys[:, column], PRIME)) % PRIME
    return value
