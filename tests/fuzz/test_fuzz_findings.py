"""Statements the fuzzer (tests/fuzz/) found raising raw Python exceptions or InternalErrors: now trdb errors or results."""
from __future__ import annotations

import re

import numpy as np
import pytest

import trdb
from trdb.errors import QueryCancelled

G = "CREATE TENSOR G SHAPE (64, 48) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1)"


@pytest.fixture
def gcur(cur):
    cur.execute(G)
    return cur


def dense(cur, name: str = "G") -> np.ndarray:
    cur.execute(f"SELECT * FROM {name}")
    return cur.fetch_tensor()


@pytest.mark.parametrize("text", ["\ud800", "SELECT * FROM G WHERE \ud800", "SELECT 1 AS x\udcff"])
def test_a_lone_surrogate_is_not_utf8_text(gcur, text):
    with pytest.raises(trdb.ProgrammingError, match="not valid UTF-8"):
        gcur.execute(text)
    gcur.execute("SELECT 1")


@pytest.mark.parametrize("text", ["\ufeff", "\u200b\u200b ", "\ufeff;\u200b", "\u180e -- nothing"])
def test_invisible_characters_alone_are_an_empty_statement(cur, text):
    with pytest.raises(trdb.ProgrammingError, match="empty statement"):
        cur.execute(text)


def test_a_bom_before_a_statement_is_space(cur):
    cur.execute("\ufeffSELECT 1 AS x")
    assert cur.fetchall() == [(1,)]


def test_delete_and_update_of_a_0d_tensor(cur):
    cur.execute("CREATE TENSOR f SHAPE () TILE () FILL ONES")
    cur.execute("DELETE FROM f WHERE FALSE")
    assert cur.rowcount == 0
    cur.execute("UPDATE f SET v = f.v * 2 WHERE TRUE")
    assert cur.rowcount == 1 and dense(cur, "f") == np.float32(2)
    cur.execute("DELETE FROM f WHERE TRUE")
    assert cur.rowcount == 1
    cur.execute("SELECT * FROM f")
    assert cur.fetchall() == []


@pytest.mark.parametrize("value", ["text", b"bytes", [1, 2], {"a": 1}])
@pytest.mark.parametrize("statement", ["SELECT * FROM G WHERE G.i >= ?", "UPDATE G SET v = G.v WHERE G.i >= ?",
                                       "DELETE FROM G WHERE G.i BETWEEN 0 AND ?"])
def test_a_non_numeric_parameter_compared_with_a_key_is_refused_when_bound(gcur, statement, value):
    before = dense(gcur)
    with pytest.raises(trdb.ProgrammingError, match=f"parameter 1 is a {type(value).__name__}") as caught:
        gcur.execute(statement, (value,))
    assert "LINE 1" in str(caught.value)
    np.testing.assert_array_equal(dense(gcur), before)


def test_like_constants_still_compare(gcur):
    gcur.execute("SELECT * FROM G WHERE 'a' = 'a' AND G.i = 0 AND G.j = 0")
    assert len(gcur.fetchall()) == 1


@pytest.mark.parametrize("expr", ["-'x'", "MIN('')", "SUM('a')"])
def test_a_string_constant_cannot_be_negated_or_aggregated(gcur, expr):
    with pytest.raises(trdb.ProgrammingError, match="takes numbers"):
        gcur.execute(f"SELECT {expr} AS v FROM G")


def test_minus_null_is_null(gcur):
    gcur.execute("SELECT -NULL AS v FROM G")
    expected = gcur.fetchall()
    gcur.execute("SELECT NULL AS v FROM G")
    assert gcur.fetchall() == expected


def test_fetch_tensor_of_a_0d_result(gcur):
    g = dense(gcur)
    gcur.execute("SELECT SUM(REDUCE_SUM(G.v)) AS v FROM G")
    total = gcur.fetch_tensor()
    assert total.shape == () and np.isclose(total, g.sum(dtype=np.float64), rtol=1e-4)


@pytest.mark.parametrize("query,fetch", [
    ("SELECT G.i + 4294967297 AS i, G.j AS j, G.v AS v FROM G", "fetch_tensor"),
    ("SELECT G.i + 4294967297 AS i, G.j AS j, G.v AS v FROM G", "fetch_sparse"),
    ("SELECT G.i + 4611686018427387904 AS i, G.j AS j, G.v AS v FROM G", "fetch_tensor"),
    ("SELECT G.i + 4611686018427387904 AS i, G.j AS j, G.v AS v FROM G", "fetch_sparse"),
    ("SELECT * FROM big", "fetch_tensor"),
    ("SELECT * FROM big", "fetch_sparse"),
])
def test_a_fetch_too_big_for_memory_is_refused_before_it_allocates_and_keeps_the_rows(gcur, query, fetch):
    gcur.execute("CREATE TENSOR big SHAPE (100000000000, 100000000000) TILE (1000, 1000)")
    gcur.execute("INSERT INTO big VALUES (0, 0, ?)", (np.ones((1000, 1000), np.float32),))
    gcur.execute(query)
    with pytest.raises(trdb.OperationalError, match="would need .* bytes") as caught:
        getattr(gcur, fetch)()
    assert "fetchall()" in caught.value.hint and "memory" in str(caught.value)
    assert len(gcur.fetchall()) in (1, 12)   # the rows are still there


def test_fetch_sparse_of_float16_gives_float32(gcur):
    g = dense(gcur)
    gcur.execute("SELECT G.i AS i, G.j AS j, CAST(G.v AS float16) AS v FROM G")
    matrix = gcur.fetch_sparse()
    assert matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix.toarray(), g.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("value,error,match", [
    ({"a": 1}, trdb.ProgrammingError, "is a dict, not a tile"),
    ("text", trdb.ProgrammingError, "is a str, not a tile"),
    (b"bytes", trdb.ProgrammingError, "is a bytes, not a tile"),
    (None, trdb.ProgrammingError, "is NULL, not a tile"),
    ([[1, 2], [3]], trdb.ProgrammingError, "is a ragged list"),
    ([1, 2, 3], trdb.DataError, r"has shape \(3,\)"),
    (float("nan"), trdb.DataError, "integers have no NaN"),
    (2 ** 40, trdb.DataError, "outside its range"),
])
def test_insert_of_a_value_that_is_not_a_tile(cur, value, error, match):
    cur.execute("CREATE TENSOR f SHAPE (8, 8) TILE (4, 4) DTYPE int32")
    with pytest.raises(error, match=match):
        cur.execute("INSERT INTO f VALUES (0, 0, ?)", (value,))
    with pytest.raises(trdb.ProgrammingError, match="keys must be integers"):
        cur.execute("INSERT INTO f VALUES (?, 0, 1)", (None,))
    cur.execute("SELECT * FROM f")
    assert cur.fetchall() == []


def test_insert_of_a_scipy_sparse_tile_and_a_list(cur):
    import scipy.sparse
    cur.execute("CREATE TENSOR f SHAPE (8, 8) TILE (4, 4)")
    tile = np.diag([1.0, 2.0, 0.0, 4.0]).astype(np.float32)
    cur.execute("INSERT INTO f VALUES (0, 1, ?)", (scipy.sparse.coo_matrix(tile),))
    cur.execute("INSERT INTO f VALUES (1, 0, ?)", (tile.tolist(),))
    cur.execute("INSERT INTO f VALUES (1, 1, 3)")
    expected = np.zeros((8, 8), np.float32)
    expected[0:4, 4:8] = expected[4:8, 0:4] = tile
    expected[4:8, 4:8] = 3
    np.testing.assert_array_equal(dense(cur, "f"), expected)


def test_order_by_position(gcur):
    gcur.execute("SELECT G.i AS i, G.v AS v FROM G ORDER BY 1 DESC")
    assert [r[0] for r in gcur.fetchall()] == sorted([i for i in range(4) for _ in range(3)], reverse=True)
    for order in ("2 DESC", "v", "G.v"):
        with pytest.raises(trdb.ProgrammingError, match="tiles of many values have no order"):
            gcur.execute(f"SELECT G.i AS i, G.v AS v FROM G ORDER BY {order}")
    with pytest.raises(trdb.ProgrammingError, match="position 3 is not in the select list"):
        gcur.execute("SELECT G.i AS i, G.v AS v FROM G ORDER BY 3")


@pytest.mark.parametrize("value", ["1e400", "-1e400", "1e30", "'99999999999999999TB'"])
def test_a_size_setting_out_of_range_is_refused(cur, value):
    cur.execute("SHOW memory_limit")
    before = cur.fetchall()
    with pytest.raises(trdb.ProgrammingError, match="memory_limit"):
        cur.execute(f"SET memory_limit TO {value}")
    cur.execute("SHOW memory_limit")
    assert cur.fetchall() == before


def test_the_gradient_of_a_loss_that_does_not_depend_on_the_tensor_is_zero(cur):
    cur.execute("CREATE TENSOR f SHAPE (8, 8) TILE (4, 4) FILL ONES; "
                "CREATE VIEW L AS SELECT SUM(REDUCE_SUM(ONES_LIKE(W.v))) AS v FROM f AS W")
    cur.execute("SELECT * FROM GRAD(L, f)")
    assert cur.fetchall() == []   # every tile absent: zeros, as PyTorch gives
    cur.execute("SELECT * FROM GRAD(L, f)")
    np.testing.assert_array_equal(cur.fetch_tensor(), np.zeros((8, 8), np.float32))


@pytest.mark.parametrize("statement,params", [
    ("CREATE TENSOR f0 SHAPE (1, 1000000) TILE (1, 1) FILL RANDOM_UNIFORM(-1, 1, 0)", ()),
    ("CREATE TENSOR f0 FROM ? TILE (1, 1)", (np.ones((1, 1000000), np.float32),)),
])
def test_closing_the_cursor_cancels_a_long_fill_and_leaves_no_tensor(con, monkeypatch, statement, params):
    """The cursor is closed while the statement writes its first batch (an event, not a sleep: the
    load of a million tiny tiles now ends in well under a second); it stops at the next batch."""
    import threading

    from trdb.storage import tile_store
    con.execute("SET memory_limit = '16MB'")  # batches of 2 MB: the million tiles take several
    cur, raised = con.cursor(), []
    writing, closed = threading.Event(), threading.Event()
    insert = tile_store.insert_encoded

    def first_insert_waits(*args):
        writing.set()
        closed.wait(60)
        return insert(*args)
    monkeypatch.setattr(tile_store, "insert_encoded", first_insert_waits)

    def run():
        try:
            cur.execute(statement, params)
        except trdb.Error as exc:
            raised.append(exc)
    thread = threading.Thread(target=run)
    thread.start()
    assert writing.wait(120)
    cur.close()
    closed.set()
    thread.join(120)  # an outcome, not a time: the statement stops (how fast is a benchmark's business)
    assert not thread.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], QueryCancelled), raised
    monkeypatch.setattr(tile_store, "insert_encoded", insert)
    other = con.cursor()
    with pytest.raises(trdb.ProgrammingError, match='"f0" does not exist'):
        other.execute("SELECT * FROM f0")
    other.execute("CREATE TENSOR f0 SHAPE (2, 2) TILE (2, 2) FILL ONES")
    np.testing.assert_array_equal(dense(other, "f0"), np.ones((2, 2), np.float32))


def test_a_small_memory_limit_does_not_limit_fetches_but_max_bytes_does(gcur):
    g = dense(gcur)
    gcur.execute("SET memory_limit TO '1KB'")
    np.testing.assert_array_equal(dense(gcur), g)
    gcur.execute("RESET memory_limit")
    gcur.execute("CREATE TENSOR s SHAPE (4, 4) TILE (4, 4) FILL ONES")
    gcur.execute("SET max_bytes TO '1KB'")
    gcur.execute("SELECT * FROM s")
    with pytest.raises(trdb.OperationalError, match=r"would need 1600 bytes .* more than max_bytes"):
        gcur.fetch_tensor(shape=(20, 20))
    np.testing.assert_array_equal(gcur.fetch_tensor(), np.ones((4, 4), np.float32))


@pytest.mark.parametrize("query", ["SELECT ? * G.v AS v FROM G", "SELECT G.i AS i, G.j AS j, G.v - ? AS v FROM G",
                                   "SELECT G.i AS i, G.j AS j, GREATEST(G.v, ?) AS v FROM G"])
@pytest.mark.parametrize("value", [[1, 2, 3], "x", {"a": 1}])
def test_a_non_numeric_parameter_of_a_kernel_is_refused_when_bound(gcur, query, value):
    with pytest.raises(trdb.ProgrammingError, match=f"parameter 1 is a {type(value).__name__}"):
        gcur.execute(query, (value,))


@pytest.mark.parametrize("setting,value", [("max_tuples", "1.5"), ("memory_limit", "1.5")])
def test_a_fraction_of_a_count_or_a_byte_is_refused(cur, setting, value):
    with pytest.raises(trdb.ProgrammingError, match="whole number"):
        cur.execute(f"SET {setting} TO {value}")


def test_a_fetch_that_cannot_be_allocated_is_an_operational_error(gcur, monkeypatch):
    import trdb.execution.result as result

    def refuse(*args, **kwargs):
        raise MemoryError("no memory")
    gcur.execute("SELECT * FROM G")
    monkeypatch.setattr(result.np, "zeros", refuse)
    monkeypatch.setattr(result.np, "empty", refuse)
    with pytest.raises(trdb.OperationalError, match="more than this process can allocate now"):
        gcur.fetch_tensor()
    monkeypatch.undo()
    assert len(gcur.fetchall()) == 12


def test_a_sparse_parameter_of_any_format_is_taken_as_a_csr_value_or_refused_clearly(cur):
    import scipy.sparse as sp
    cur.execute("CREATE TENSOR f2 SHAPE (32, 24) TILE (16, 12) FILL ONES")
    value = sp.coo_matrix(np.eye(16, 12, dtype=np.float32))
    with pytest.raises(trdb.ProgrammingError, match="takes numbers; parameter 1 is a csr_matrix"):
        cur.execute("SELECT A0.i AS i, A0.j AS j, A0.v * ? AS v FROM f2 AS A0", [value])
    try:  # was an InternalError: a COO value has no CSR arrays
        cur.execute("CREATE TENSOR f4 AS SELECT A0.i AS i, A0.j AS j, ? AS v FROM f2 AS A0 WHERE A0.i BETWEEN -5 "
                    "AND 4611686018427387904", [value])
    except trdb.Error as exc:
        assert not isinstance(exc, trdb.InternalError), exc
    else:
        assert cur.execute("SELECT * FROM f4").fetch_tensor().sum() == 4 * 12


@pytest.mark.parametrize("value", [np.array(["a", "b"]), np.array([b"x"]), np.array([1, None], dtype=object),
                                   np.array(["2026-01-01"], dtype="datetime64[D]")])
def test_an_array_parameter_that_holds_no_numbers_is_refused_when_bound(gcur, value):
    """AVG over a text array was an InternalError (numpy's divide refused the dtype)."""
    for query in ("SELECT G.i, AVG(?) AS v FROM G GROUP BY G.i", "SELECT G.i, G.j, G.v + ? AS v FROM G"):
        with pytest.raises(trdb.ProgrammingError, match=re.escape(f"parameter 1 is an array of {value.dtype}")):
            gcur.execute(query, [value])
    gcur.execute("SELECT G.i, AVG(?) AS v FROM G GROUP BY G.i", [np.array([True, False])])
    assert len(gcur.fetchall()) == 4


def test_an_empty_tile_is_fetched_as_arrow(gcur):
    """A tile with a dimension of 0 was a ValueError from pyarrow (it builds no fixed_shape_tensor of size 0)."""
    table = gcur.execute("SELECT AVG(?) AS v FROM G", [np.zeros((0, 3), np.float32)]).fetch_arrow()
    assert table.num_rows == 1 and table.column("v").type.shape == [0, 3]
    assert table.column("v").combine_chunks().to_numpy_ndarray().shape == (1, 0, 3)


def test_plain_sql_lists_are_fetched_as_arrow_of_their_declared_types(cur):
    """Unsigned 64-bit values above int64's range were an OverflowError (the list's type was inferred)."""
    big = np.full((2, 2), 2 ** 63 + 5, dtype=np.uint64)
    table = cur.execute("SELECT ? AS u", [big]).fetch_arrow()
    assert table.column("u").to_pylist() == [big.tolist()]
    table = cur.execute("SELECT [1, 2, 3]::INTEGER[3] AS a, [1.5]::FLOAT[] AS f").fetch_arrow()
    assert str(table.schema.field("a").type) == "fixed_size_list<item: int32>[3]"
    assert str(table.schema.field("f").type) == "list<item: float>"


def test_an_allocation_the_process_cannot_make_fails_the_statement_and_changes_nothing(gcur, monkeypatch):
    """A FILL tile of 977 MB under the fuzzer's address-space limit was a raw MemoryError."""
    import trdb.ingest.fill as fill

    real = fill.generator_at  # where each tile's generator is made (then it draws the tile)

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 977. MiB for an array with shape (1000000, 4, 32, 2)")
    before = dense(gcur)
    monkeypatch.setattr(fill, "generator_at", no_memory)
    with pytest.raises(trdb.OperationalError, match="out of memory: Unable to allocate 977") as caught:
        gcur.execute("CREATE TENSOR H SHAPE (64, 48) TILE (16, 16) FILL RANDOM_NORMAL(0, 1)")
    assert "smaller tiles" in str(caught.value)
    monkeypatch.setattr(fill, "generator_at", real)
    gcur.execute("BEGIN")
    gcur.execute("UPDATE G SET v = G.v * 2")
    monkeypatch.setattr(fill, "generator_at", no_memory)
    with pytest.raises(trdb.OperationalError, match="out of memory"):
        gcur.execute("CREATE TENSOR H SHAPE (64, 48) TILE (16, 16) FILL RANDOM_NORMAL(0, 1)")
    with pytest.raises(trdb.OperationalError, match="transaction is aborted"):
        gcur.execute("SELECT 1")
    gcur.execute("ROLLBACK")
    np.testing.assert_array_equal(dense(gcur), before)
    assert [r[0] for r in gcur.execute("SHOW TENSORS").fetchall()] == ["G"]


def test_a_null_number_in_a_tensor_expression_is_a_data_error(gcur):
    """SUM of a number over no tuples is NULL; added to a fresh tile in place it was an InternalError (numpy cast
    an object result); multiplied, a DataError quoting Python's TypeError."""
    gcur.execute("CREATE TENSOR E SHAPE (1, 1, 8) TILE (1, 1, 4)")  # no tiles
    for query in ("SELECT G.v * 2.5 + A1.v AS v FROM G CROSS JOIN (SELECT SUM(POWER(2.5, -1)) AS v FROM E) AS A1",
                  "SELECT G.v * A1.v AS v FROM G CROSS JOIN (SELECT SUM(2.5) AS v FROM E) AS A1"):
        with pytest.raises(trdb.DataError, match="an operand is NULL") as caught:
            gcur.execute(query)
        assert "over no tuples is NULL" in str(caught.value)
    gcur.execute("SELECT G.v * 2.5 + A1.v AS v FROM G CROSS JOIN (SELECT SUM(POWER(2.5, -1)) AS v FROM G) AS A1")
    rows = gcur.fetchall()
    assert len(rows) == 12 and all(np.all(np.isfinite(v)) for (v,) in rows)


def test_a_sum_of_a_float_constant_is_described_as_a_float(gcur):
    gcur.execute("SELECT SUM(2.5) AS v FROM G")
    assert gcur.description[0][1] == "FLOAT" and gcur.fetchall() == [(12 * 2.5,)]
    gcur.execute("SELECT MIN(2) AS v FROM G")
    assert gcur.description[0][1] == "INT" and gcur.fetchall() == [(2,)]


def test_an_aggregate_of_a_text_column_is_refused_with_its_reason(gcur):
    """The check for numbers read `.value` of any argument: for a subquery's text column, an AttributeError."""
    with pytest.raises(trdb.ProgrammingError, match="MIN takes numbers; this column holds str values"):
        gcur.execute("SELECT A1.i, MIN(A1.v) AS v FROM (SELECT G.i AS i, 'x' AS v FROM G) AS A1 GROUP BY A1.i")


def test_the_tile_grid_of_a_huge_shape_is_exact(cur):
    """The grid was computed in floats: 2**63 - 1 rows in tiles of 1 gave 2**63 tiles, which the key check could
    not hold as int64 (OverflowError reading the tensor); the last key is 2**63 - 2."""
    cur.execute("CREATE TENSOR T SHAPE (9223372036854775807, 16) TILE (1, 16)")
    assert cur.connection._session().catalog.require_tensor("T").grid == (2 ** 63 - 1, 1)
    cur.execute("INSERT INTO T VALUES (5216918249766893710, 0, ?), (9223372036854775806, 0, ?)",
                [np.ones((1, 16), np.float32), np.full((1, 16), 2, np.float32)])
    assert sorted(r[:2] for r in cur.execute("SELECT * FROM T").fetchall()) == [(5216918249766893710, 0),
                                                                                (9223372036854775806, 0)]
    with pytest.raises(trdb.DataError, match="outside the tile grid"):
        cur.execute("INSERT INTO T VALUES (9223372036854775807, 0, ?)", [np.ones((1, 16), np.float32)])


def test_a_boolean_tensor_has_no_gradient(cur):
    """The gradient of ABS over a bool tensor subtracted bool masks (InternalError); of SUMSQ it was a bool tile."""
    cur.execute("CREATE TENSOR B FROM ? TILE (2, 2)", [np.array([[True, False], [False, True]])])
    cur.execute("CREATE VIEW L AS SELECT SUM(REDUCE_SUM(ABS(W.v))) AS v FROM B AS W")
    for statement in ("SELECT * FROM GRAD(L, B)", "MINIMIZE L WRT (B) WITH (steps = 1, optimizer = 'adam')"):
        with pytest.raises(trdb.ProgrammingError, match="B has dtype bool, which has no gradient"):
            cur.execute(statement)
    assert cur.execute("SELECT * FROM B").fetch_tensor().tolist() == [[True, False], [False, True]]


def test_complex_tiles_are_refused_by_fetch_arrow_and_fetched_otherwise(gcur):
    """Arrow has no complex type: pyarrow's ArrowNotImplementedError ("Unsupported numpy type 15") escaped."""
    query, value = "SELECT SUM(? - G.v) AS v, COUNT(*) AS c FROM G", [np.ones((16, 16), np.complex64)]
    with pytest.raises(trdb.NotSupportedError, match="Arrow has no type for complex64 tiles"):
        gcur.execute(query, value).fetch_arrow()
    (total, count), = gcur.execute(query, value).fetchall()
    assert total.dtype == np.complex64 and count == 12


def test_an_int_tile_plus_a_float_is_not_written_into_the_int_tile():
    from trdb.execution.tile_math.inplace import _binary
    from trdb.kernels.numpy_backend import NUMPY_BACKEND
    tile = np.ones(3, np.int32)
    assert _binary(NUMPY_BACKEND, np.add, tile, 0.5, np.dtype(np.int32)) is None  # the kernel runs instead
    np.testing.assert_array_equal(tile, [1, 1, 1])
    narrowed = np.ones(3, np.float32)  # a float64 scalar into a float32 tile: in place, as before
    assert _binary(NUMPY_BACKEND, np.add, narrowed, np.float64(0.5), np.dtype(np.float32)) is narrowed


def test_tiles_that_do_not_broadcast_in_place_are_a_data_error(cur):
    # seed 31415213: a fresh temporary of an edge tile (8,) plus a (16, 16) tile raised numpy's ValueError
    # while deciding whether to add in place; the tiles' types line up, so the kernel refuses them first
    cur.execute("CREATE TENSOR V SHAPE (40) TILE (16) DTYPE float64 FILL RANDOM_UNIFORM(-1, 1, 3)")
    cur.execute("CREATE TENSOR M SHAPE (48, 32) TILE (16, 16) DTYPE int32 FILL ONES")
    with pytest.raises(trdb.DataError, match=r"operator \+: tiles of shapes \(8,\) and \(16, 16\) do not line up"):
        cur.execute("SELECT V.i, M.j, MIN(1e-30 + V.v + GREATEST(TRANSPOSE(M.v), CAST(M.v AS float64))) AS v "
                    "FROM V, M GROUP BY V.i, M.j")
    assert cur.execute("SELECT SUM(SUMSQ(v)) FROM M").fetchall() == [(48 * 32,)]


@pytest.mark.parametrize("expression", ["COALESCE('', 0.1)", "COALESCE(NULL, 'x')"])
def test_a_string_in_coalesce_is_refused_as_in_any_aggregate(gcur, expression):
    # seed 17320176: MIN(COALESCE('', 0.1)) reached numpy's minimum with strings: an InternalError
    with pytest.raises(trdb.ProgrammingError, match=r"COALESCE takes numbers; the constant is a str"):
        gcur.execute(f"SELECT MIN({expression}) AS v FROM G")
    assert gcur.execute("SELECT MIN(COALESCE(NULL, 0.5)) AS v FROM G").fetchall() == [(0.5,)]


SMALL_TILES = "CREATE TENSOR S SHAPE (100, 100) TILE (1, 1) FILL ONES"  # 10,000 tiles of one float


@pytest.mark.parametrize("statement,rows_left,value", [("UPDATE S SET v = S.v * 3", 100, 3),
                                                     ("DELETE FROM S WHERE S.i >= 50", 50, 1)])
def test_a_write_to_many_small_tiles_deletes_them_in_one_statement(cur, monkeypatch, statement, rows_left, value):
    from trdb.storage import tile_store
    cur.execute(SMALL_TILES)
    deleting, calls = tile_store.delete_tiles, []
    monkeypatch.setattr(tile_store, "delete_tiles", lambda *args: calls.append(1) or deleting(*args))
    cur.execute(statement)
    assert len(calls) == 1  # one DELETE reading the table, not one per batch of 64 tuples (157 and 79)
    expected = np.zeros((100, 100), np.float32)
    expected[:rows_left] = value
    np.testing.assert_array_equal(dense(cur, "S"), expected)


@pytest.mark.parametrize("statement,where", [("UPDATE S SET v = S.v * 3", "delete_tiles"),
                                             ("UPDATE S SET v = S.v * 3", "refresh_statistics"),
                                             ("DELETE FROM S WHERE S.i >= 50", "delete_tiles")])
def test_a_cancel_during_a_writes_calls_into_duckdb_fails_it_and_changes_nothing(con, monkeypatch, statement,
                                                                                 where):
    from trdb.catalog.catalog import Catalog
    from trdb.storage import tile_store
    cur = con.cursor()
    cur.execute(SMALL_TILES)
    owner = tile_store if where == "delete_tiles" else Catalog
    original = getattr(owner, where)

    def cancelled_meanwhile(*args):  # a cancel that arrives while DuckDB runs a long write
        con._live.cancel()
        return original(*args)
    monkeypatch.setattr(owner, where, cancelled_meanwhile)
    with pytest.raises(QueryCancelled):
        cur.execute(statement)
    monkeypatch.undo()
    np.testing.assert_array_equal(dense(cur, "S"), np.ones((100, 100), np.float32))


def test_an_insert_into_a_tensor_of_a_zero_length_axis_is_refused_cleanly(cur):
    """The keys a write has seen are grid positions: a tensor loaded from an empty array has an empty grid,
    which numpy cannot number (InternalError: 'cannot unravel if shape has zero entries')."""
    cur.execute("CREATE TENSOR f5 FROM ? TILE (2, 3)", [np.zeros((0, 3), np.int32)])
    with pytest.raises(trdb.DataError, match=r"key \(0, 0\) is outside the tile grid \(0, 1\)"):
        cur.execute("INSERT INTO f5 VALUES (0, 0, ?), (0, 0, ?)", [np.zeros((2, 3), np.int32)] * 2)
    cur.execute("UPDATE f5 SET v = f5.v * 2")
    assert cur.execute("SELECT COUNT(*) AS n FROM f5").fetchone()[0] == 0
