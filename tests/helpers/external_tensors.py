"""Stored tensors turned into external ones (a Parquet dataset of the same tiles), for running the same
statements on external tensors: on a local or shared directory, or on an S3 server (uploaded there).

`Externals(root)` exports each stored tensor of a connection with COPY (two partitions), moves the
stored tensor aside under another name, and registers an external tensor of the old name at the
dataset; `restore` puts the stored tensors back, so the statements after a query (writes among
them) run on stored tensors as written. A tensor COPY cannot write (a scalar one, one with int
tiles) stays stored.
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Callable, Optional

import trdb

ASIDE = "__stored_"  # the prefix of a stored tensor moved aside while its name is an external tensor's
PARTITIONS = 2


class Externals:
    """Externalizes the stored tensors of connections; `upload(folder, name)` (for S3) puts the dataset
    written in `folder` on the server and gives its URI, else the folder itself is the location."""

    def __init__(self, root: Path, upload: Optional[Callable[[Path, str], str]] = None):
        self.root, self.upload = root, upload
        self._numbers = itertools.count()

    def externalize(self, cur) -> list[str]:
        """Each stored tensor of `cur`'s connection read from a dataset from now on: the names moved."""
        moved = []
        try:
            tensors = cur.execute("SHOW TENSORS").fetchall()
        except trdb.Error:  # an aborted transaction: the statements fail alike on stored tensors
            return moved
        for name, keys, shape, tile, dtype, *_, location in tensors:
            if name.startswith(ASIDE) or location is not None or not tile.strip("[]"):
                continue  # moved aside, external already, or a scalar
            if self._one(cur, name, keys, shape, tile, dtype):
                moved.append(name)
        return moved

    def _one(self, cur, name: str, keys: str, shape: str, tile: str, dtype: str) -> bool:
        folder = self.root / f"{next(self._numbers)}_{name.lower()}"
        try:
            cur.execute(f"COPY {name} TO '{folder}' (FORMAT parquet, PARTITIONS {PARTITIONS})")
        except trdb.Error:
            return False  # a tensor COPY does not write as a dataset: it stays stored
        if not os.path.isdir(folder):
            return False
        location = self.upload(folder, folder.name) if self.upload else str(folder)
        cur.execute(f"ALTER TENSOR {name} RENAME TO {ASIDE}{name}")
        try:
            cur.execute(f"CREATE TENSOR {name} ({keys}) SHAPE ({shape.strip('[]')}) TILE ({tile.strip('[]')}) "
                        f"DTYPE {dtype} LOCATION '{location}'")
        except trdb.Error:
            cur.execute(f"ALTER TENSOR {ASIDE}{name} RENAME TO {name}")
            raise
        return True

    @staticmethod
    def restore(cur, moved: list[str]) -> None:
        """The stored tensors back under their names (the external ones dropped). In a transaction the query
        aborted, nothing runs: its ROLLBACK undoes the externalizing too."""
        try:
            for name in moved:
                cur.execute(f"DROP TENSOR {name}")
                cur.execute(f"ALTER TENSOR {ASIDE}{name} RENAME TO {name}")
        except trdb.Error:
            pass


def s3_uploader(endpoint: str, bucket: str, prefix: str) -> Callable[[Path, str], str]:
    """An `upload` putting a dataset's files on the S3 server at s3://bucket/prefix/name (with boto3, as a user)."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)

    def upload(folder: Path, name: str) -> str:
        for path in sorted(folder.rglob("*.parquet")):
            client.upload_file(str(path), bucket, f"{prefix}/{name}/{path.relative_to(folder).as_posix()}")
        return f"s3://{bucket}/{prefix}/{name}"
    return upload
