"""Random queries over integer columns with NULLs give DuckDB's answers (tests/helpers/key_queries.py): trdb's engine
and DuckDB on the same rows. Found this way, and fixed: `//` and `%` that floored, NOT of a NULL comparison taken
as true, NOT IN (.., NULL), AVG over no value."""
from __future__ import annotations

import random

import duckdb
import pytest

import trdb
from helpers.key_queries import normalized, query, table_rows, values_sql

SEEDS = range(12)
QUERIES = 40


@pytest.mark.parametrize("seed", SEEDS)
def test_key_queries_give_duckdbs_answers(seed):
    r = random.Random(seed)
    t, u = table_rows(r)
    ours, theirs = trdb.connect(), duckdb.connect()
    for con in (ours, theirs):
        con.execute("CREATE TABLE t (id BIGINT, a BIGINT, b BIGINT, c BIGINT)")
        con.execute(f"INSERT INTO t VALUES {values_sql(t)}")
        con.execute("CREATE TABLE u (k BIGINT, m BIGINT)")
        con.execute(f"INSERT INTO u VALUES {values_sql(u)}")
    ours.execute("CREATE TENSOR one SHAPE (1,) TILE (1,) FILL ONES")
    for _ in range(QUERIES):
        mine, duck = query(r)
        try:
            expected = normalized(theirs.execute(duck).fetchall())
        except duckdb.Error:  # an overflow or a division by zero: trdb must fail too
            with pytest.raises(trdb.Error):
                ours.execute(mine).fetchall()
            continue
        assert normalized(ours.execute(mine).fetchall()) == expected, mine
