"""The PEP 249 surface and the tensor extensions; DuckDB as the oracle for plain SQL pass-through."""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse

import trdb


def test_module_globals_and_exception_hierarchy():
    assert (trdb.apilevel, trdb.threadsafety, trdb.paramstyle) == ("2.0", 1, "qmark")
    assert issubclass(trdb.Warning, Exception) and issubclass(trdb.Error, Exception)
    for cls in (trdb.InterfaceError, trdb.DatabaseError):
        assert issubclass(cls, trdb.Error)
    for cls in (trdb.DataError, trdb.OperationalError, trdb.IntegrityError, trdb.InternalError,
                trdb.ProgrammingError, trdb.NotSupportedError):
        assert issubclass(cls, trdb.DatabaseError)
    assert trdb.NUMBER == "BIGINT" and trdb.TENSOR == "TENSOR(float32, [2, 2])" and trdb.STRING != "BIGINT"


def test_description_rowcount_and_fetching(cur):
    cur.execute("CREATE TENSOR T SHAPE (6, 4) TILE (2, 4) FILL ONES")
    assert cur.description is None
    cur.execute("SELECT T.i, T.j, T.v * 2 AS w FROM T ORDER BY i")
    assert [d[0] for d in cur.description] == ["i", "j", "w"]
    assert cur.description[0][1] == trdb.NUMBER and cur.description[2][1] == trdb.TENSOR
    assert cur.rowcount == 3
    first = cur.fetchone()
    assert first[:2] == (0, 0) and isinstance(first[0], int)
    np.testing.assert_array_equal(first[2], np.full((2, 4), 2, np.float32))
    cur.arraysize = 2
    assert [r[0] for r in cur.fetchmany()] == [1, 2]
    assert cur.fetchall() == [] and cur.fetchone() is None


def test_executemany_and_rowcount(cur):
    cur.execute("CREATE TENSOR T SHAPE (4) TILE (1)")
    cur.executemany("INSERT INTO T VALUES (?, ?)", [(0, 1.5), (2, 2.5), (3, 0.0)])
    assert cur.rowcount == 3
    np.testing.assert_array_equal(cur.execute("SELECT * FROM T").fetch_tensor(), [1.5, 0, 2.5, 0])
    assert cur.execute("SELECT COUNT(*) FROM T").fetchone() == (3,)  # the inserted zero tile is stored (a value)
    cur.execute("DELETE FROM T WHERE T.i >= 2")
    assert cur.rowcount == 2


def test_closed_cursor_and_connection_raise_interface_error():
    con = trdb.connect()
    cur = con.cursor()
    cur.close()
    with pytest.raises(trdb.InterfaceError):
        cur.execute("SHOW TENSORS")
    with pytest.raises(trdb.InterfaceError):
        con.cursor().fetchall()
    con.close()
    with pytest.raises(trdb.InterfaceError):
        con.cursor()
    con.close()  # closing twice is harmless


def test_fetch_arrow_has_a_fixed_shape_tensor_column(cur):
    T = np.arange(20, dtype=np.float32).reshape(4, 5)
    cur.execute("CREATE TENSOR T FROM ? TILE (2, 5)", [T])
    table = cur.execute("SELECT * FROM T ORDER BY i").fetch_arrow()
    assert table.column_names == ["i", "j", "v"]
    assert isinstance(table.column("v").type, pa.FixedShapeTensorType)
    np.testing.assert_array_equal(table.column("v").combine_chunks().to_numpy_ndarray(), T.reshape(2, 2, 5))


def test_fetch_arrow_pads_ragged_tiles_and_gives_their_shapes(cur):
    cur.execute("CREATE TENSOR T SHAPE (5, 2) TILE (3, 2) FILL ONES")
    table = cur.execute("SELECT * FROM T ORDER BY i").fetch_arrow()
    assert table.column("v_shape").to_pylist() == [[3, 2], [2, 2]]
    assert table.column("v").combine_chunks().to_numpy_ndarray()[1].sum() == 4


def test_fetchnumpy_and_fetch_sparse(cur):
    M = np.zeros((6, 6), np.float64)
    M[0, 1], M[5, 5] = 3, 4
    cur.execute("CREATE TENSOR M FROM ? TILE (3, 3)", [scipy.sparse.csr_matrix(M)])  # sparse: zero tiles absent
    columns = cur.execute("SELECT * FROM M ORDER BY i").fetchnumpy()
    assert columns["i"].tolist() == [0, 1] and columns["v"].shape == (2, 3, 3)
    sparse = cur.execute("SELECT * FROM M").fetch_sparse()
    assert sparse.nnz == 2
    np.testing.assert_array_equal(sparse.toarray(), M)
    wider = cur.execute("SELECT * FROM M").fetch_sparse(shape=(8, 7))
    assert wider.shape == (8, 7) and wider.nnz == 2 and wider[5, 5] == 4
    with pytest.raises(trdb.DataError, match="outside the shape"):
        cur.execute("SELECT * FROM M").fetch_sparse(shape=(4, 4))


def test_parameters_are_bound_not_spliced(cur):
    cur.execute("CREATE TABLE names (s VARCHAR)")
    cur.execute("INSERT INTO names VALUES (?)", ["x'); DROP TABLE names; --"])
    assert cur.execute("SELECT s FROM names").fetchall() == [("x'); DROP TABLE names; --",)]
    cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
    cur.execute("SELECT T.i, T.j, T.v * ? AS v FROM T WHERE T.i = ?", [3.0, 1])
    assert {r[:2] for r in cur.fetchall()} == {(1, 0), (1, 1)}


PLAIN_SQL = [
    "CREATE TABLE items (id INTEGER, name VARCHAR, price DOUBLE)",
    "INSERT INTO items VALUES (1, 'a', 2.5), (2, 'b', 4.0), (3, 'c', NULL)",
    "UPDATE items SET price = price * 2 WHERE id = 2",
    "SELECT id, name, price FROM items ORDER BY id",
    "SELECT count(*), sum(price), avg(price) FROM items",
    "SELECT name, row_number() OVER (ORDER BY price DESC NULLS LAST) FROM items ORDER BY name",
    "SELECT upper(name) || '!' AS shout FROM items WHERE price IS NOT NULL ORDER BY 1",
    "DELETE FROM items WHERE id = 3",
    "SELECT * FROM items ORDER BY id",
    "SELECT 1 + 1, 'x' AS y",
    "CREATE VIEW cheap AS SELECT * FROM items WHERE price < 5",
    "SELECT * FROM cheap",
    "DESCRIBE items",
]


def test_plain_sql_passes_through_with_duckdb_semantics(cur):
    oracle = duckdb.connect()
    for sql in PLAIN_SQL:
        expected = oracle.execute(sql).fetchall()
        if cur.execute(sql).description is None:  # DDL, and a write whose count is the rowcount: no result set
            assert expected in ([], [(cur.rowcount,)]), sql
            with pytest.raises(trdb.InterfaceError):
                cur.fetchall()
        else:
            assert cur.fetchall() == expected, sql
    oracle.close()


def test_count_is_a_value_not_a_key(cur):
    cur.execute("CREATE TENSOR A SHAPE (8, 4) TILE (2, 2) FILL ONES")
    cur.execute("SELECT A.i, COUNT(*) AS n, SUM(A.v) AS v FROM A GROUP BY A.i")
    assert cur.description[1][1] == trdb.NUMBER and cur.description[1][6] is False
    assert cur.fetch_tensor().shape == (8, 2)


def test_fetch_arrow_with_zero_dimensional_tiles(cur):
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    table = cur.execute("SELECT A.i, A.j, SUMSQ(A.v) AS s FROM A ORDER BY i, j").fetch_arrow()
    assert table.column("s").to_pylist() == [4.0] * 4


@pytest.mark.parametrize("sql,count", [
    ("WITH x AS (SELECT 1 AS a UNION ALL SELECT 2) INSERT INTO w SELECT a FROM x", 2),
    ('WITH "insert"(b) AS (SELECT 5), y AS (SELECT (1) AS c) INSERT INTO w SELECT b FROM "insert"', 1),
    ("WITH x AS (SELECT 1 AS a) DELETE FROM w WHERE a IN (SELECT a FROM x)", 1),
    ("WITH x AS (SELECT 2 AS a) UPDATE w SET a = 3 WHERE a IN (SELECT a FROM x)", 1)])
def test_a_write_after_with_is_a_row_count_not_a_result_set(cur, sql, count):
    cur.execute("CREATE TABLE w (a INTEGER)")
    cur.execute("INSERT INTO w VALUES (1), (2)")
    cur.execute(sql)
    assert cur.description is None and cur.rowcount == count
    with pytest.raises(trdb.InterfaceError):
        cur.fetchall()


@pytest.mark.parametrize("sql", ["WITH x AS (SELECT 'insert' AS a) SELECT * FROM x",
                                 "WITH x AS (SELECT 1 AS a) INSERT INTO w SELECT a FROM x RETURNING a"])
def test_a_query_after_with_keeps_its_rows(cur, sql):
    cur.execute("CREATE TABLE w (a VARCHAR)")
    assert len(cur.execute(sql).fetchall()) == 1 and cur.description is not None
