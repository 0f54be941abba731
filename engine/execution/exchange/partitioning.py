"""Which partition a key tuple belongs to: the one function scans, repartitions and Ray routing share."""
from __future__ import annotations

from trdb.storage.key_hash import key_hash


def partition_of(key: tuple, partitions: int) -> int:
    # the same hash a partitioned scan computes in SQL (storage.key_hash), so both place a key alike
    return key_hash(key) % partitions
