"""A new version of a kept partition shipped as its changes: the tiles a write changed, not the partition.

A write gives a tensor a new data version, so its partitions have new keys and must reach the actors
again. Where an actor keeps another version of the same partition, the driver compares the tiles it
reads now with digests of those it shipped then (per tile key, kept beside the residency record) and
sends only the tiles that differ or are new; for the others it sends the key alone, and the actor
takes its own copy of that tile (`patched`). The digests cost a pass over the partition on the driver
(which reads it anyway) and a few dozen bytes per tile; the bytes moved are those of the changed tiles.
"""
from __future__ import annotations

import hashlib
from typing import Any, Optional

import numpy as np

from trdb.errors import InternalError

Items = list[tuple[tuple, Optional[tuple]]]  # per tile key in the new order: its row, or None (unchanged)


def tile_digest(value: Any) -> bytes:
    """A digest of one value: its type, shape and bytes (dense arrays, CSR tiles, plain scalars)."""
    digest = hashlib.blake2b(digest_size=16)
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.view(np.uint8).reshape(-1).data if array.size else b"")
    elif hasattr(value, "indptr"):  # scipy.sparse CSR
        digest.update(f"csr{value.dtype.str}{value.shape}".encode())
        for part in (value.indptr, value.indices, value.data):
            digest.update(np.ascontiguousarray(part).view(np.uint8).reshape(-1).data if part.size else b"|")
    else:
        digest.update(repr((type(value).__name__, value)).encode())
    return digest.digest()


def digests_of(rows: list) -> dict[tuple, bytes]:
    """Per tile key (every column but the last), the digest of its value."""
    return {tuple(row[:-1]): tile_digest(row[-1]) for row in rows}


def changes(rows: list, digests: dict[tuple, bytes], base: dict[tuple, bytes]) -> tuple[Items, list]:
    """The new partition as items against `base`'s digests, and the rows among them that must be sent."""
    items: Items = []
    sent = []
    for row in rows:
        key = tuple(row[:-1])
        if base.get(key) == digests[key]:
            items.append((key, None))
        else:
            items.append((key, row))
            sent.append(row)
    return items, sent


def patched(base_rows: Optional[list], items: Items) -> list:
    """In the actor: the new partition, from the changed rows sent and its own copy of the others."""
    if base_rows is None:
        raise InternalError("the Ray worker no longer holds the version a partition's changes apply to")
    by_key = {tuple(row[:-1]): row for row in base_rows}
    return [row if row is not None else by_key[key] for key, row in items]
