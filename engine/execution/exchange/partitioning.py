"""Which partition a key tuple belongs to: the one function scans and repartitions share."""
from __future__ import annotations


def partition_of(key: tuple, partitions: int) -> int:
    # hash() of a tuple of Python ints is deterministic (no string hashing involved)
    return hash(key) % partitions
