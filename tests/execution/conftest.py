"""Fixtures of the column-batch operator tests: every run of tiles read as column batches; two tensors to join."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.storage import tile_codec, tile_runs


@pytest.fixture
def every_run_stacked(monkeypatch):
    """Every run of dense tiles of one shape read as column batches, however short: small tensors of the logic
    files and random queries go through the operators' column paths, edge tiles in batches of their own."""
    monkeypatch.setattr(tile_runs, "MIN_RUN", 1)
    monkeypatch.setattr(tile_codec, "MIN_RUN", 1)


@pytest.fixture
def pairs(cur):
    """T: 11 x 5 tiles of 4 x 4 of a 42 x 20 array (row i = 10: edge tiles of 2 x 4) but its row i = 8; S: the
    full tiles of the array's even rows, times 3. T's odd rows and edge row meet nothing, S's row 8 no T."""
    rng = np.random.default_rng(12)
    a = rng.standard_normal((42, 20)).astype(np.float32)
    cur.execute("SET workers = 1")  # one order of tuples, whatever path they take
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [a])
    cur.execute("CREATE TENSOR T AS SELECT A.i, A.j, A.v FROM A WHERE A.i <> 8")
    cur.execute("CREATE TENSOR S AS SELECT A.i, A.j, A.v * 3 AS v FROM A WHERE A.i % 2 = 0 AND A.i < 10")
    return cur, a
