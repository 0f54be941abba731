"""A connection holding one small tensor A (3 x 5 float32 in tiles of 2 x 2: edge tiles on both axes)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

import trdb

A = np.arange(15, dtype=np.float32).reshape(3, 5)


@pytest.fixture(name="con")
def connection_with_a() -> Iterator[trdb.Connection]:
    """A connection (one worker) in which tensor A holds `A`; closed after the test."""
    connection = trdb.connect(workers=1)
    connection.execute("CREATE TENSOR A FROM ? TILE (2, 2)", [A])
    yield connection
    connection.close()
