"""Bad input raises the right PEP 249 exception with a clear message; the connection stays usable."""
from __future__ import annotations

import numpy as np
import pytest

import trdb


@pytest.fixture
def loaded(cur):
    cur.execute("CREATE TENSOR A FROM ? TILE (4, 4)", [np.ones((8, 8), np.float32)])
    return cur


def still_usable(cur):
    cur.execute("SELECT COUNT(*) FROM A")
    assert cur.fetchone() == (4,)


def test_syntax_error_has_line_column_and_caret(loaded):
    with pytest.raises(trdb.ProgrammingError) as info:
        loaded.execute("SELECT A.i,\n  A.v\nFROM A WHERE A.i = = 1")
    message = str(info.value)
    assert 'syntax error at or near "="' in message
    assert "LINE 3: FROM A WHERE A.i = = 1" in message
    caret_line = message.splitlines()[message.splitlines().index("LINE 3: FROM A WHERE A.i = = 1") + 1]
    assert caret_line.index("^") == len("LINE 3: FROM A WHERE A.i = ")
    assert (info.value.line, info.value.column) == (3, 20)
    still_usable(loaded)


def test_unknown_names_suggest_the_nearest(loaded):
    with pytest.raises(trdb.ProgrammingError, match='relation "AA" does not exist(.|\n)*did you mean "A"'):
        loaded.execute("SELECT * FROM AA")
    with pytest.raises(trdb.ProgrammingError, match='column "A.w" does not exist(.|\n)*did you mean "A.v"'):
        loaded.execute("SELECT A.w FROM A")
    with pytest.raises(trdb.ProgrammingError, match='function "SIGMOD" does not exist(.|\n)*SIGMOID'):
        loaded.execute("SELECT A.i, A.j, SIGMOD(A.v) FROM A")
    with pytest.raises(trdb.ProgrammingError, match='unknown setting "worker"(.|\n)*workers'):
        loaded.execute("SET worker = 2")
    still_usable(loaded)


def test_shape_mismatch_names_operator_and_both_shapes(loaded):
    loaded.execute("CREATE TENSOR B FROM ? TILE (3, 3)", [np.ones((9, 9), np.float32)])
    with pytest.raises(trdb.ProgrammingError, match=r"MATMUL: shapes \(4, 4\) and \(3, 3\)"):
        loaded.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j")
    with pytest.raises(trdb.ProgrammingError, match=r"operator \+: shapes \(4, 4\) and \(3, 3\)"):
        loaded.execute("SELECT A.i, A.j, A.v + B.v FROM A JOIN B ON A.i = B.i AND A.j = B.j")
    still_usable(loaded)


def test_dtype_mismatch_is_reported(loaded):
    with pytest.raises(trdb.ProgrammingError, match="CAST"):
        loaded.execute("SELECT A.i, A.j, CAST(A.v AS complex99) FROM A")
    with pytest.raises(trdb.ProgrammingError, match="dtype"):
        loaded.execute("CREATE TENSOR Q SHAPE (2, 2) TILE (2, 2) DTYPE float128")
    still_usable(loaded)


def test_wrong_parameter_counts(loaded):
    with pytest.raises(trdb.ProgrammingError, match="1 parameter.*2 were given"):
        loaded.execute("SELECT A.i, A.j, A.v * ? FROM A", [1, 2])
    with pytest.raises(trdb.ProgrammingError, match="1 parameter.*0 were given"):
        loaded.execute("CREATE TENSOR B FROM ? TILE (2, 2)")
    still_usable(loaded)


def test_pickled_npy_is_refused(loaded, tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"evil": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(trdb.DataError, match="never unpickles"):
        loaded.execute(f"CREATE TENSOR P FROM '{path}' TILE (1)")
    with pytest.raises(trdb.OperationalError, match="no such file"):
        loaded.execute(f"CREATE TENSOR P FROM '{tmp_path / 'missing.npy'}' TILE (1)")
    still_usable(loaded)


def test_npy_file_loads(loaded, tmp_path):
    path = tmp_path / "m.npy"
    M = np.arange(30, dtype=np.float64).reshape(5, 6)
    np.save(path, M)
    loaded.execute(f"CREATE TENSOR M FROM '{path}' TILE (2, 4)")
    np.testing.assert_array_equal(loaded.execute("SELECT * FROM M").fetch_tensor(), M)


def test_duplicate_names_and_missing_drops(loaded):
    with pytest.raises(trdb.IntegrityError, match='"A" already exists'):
        loaded.execute("CREATE TENSOR A SHAPE (2) TILE (2)")
    with pytest.raises(trdb.ProgrammingError, match='tensor "Q" does not exist'):
        loaded.execute("DROP TENSOR Q")
    loaded.execute("DROP TENSOR IF EXISTS Q")
    loaded.execute("DROP VIEW IF EXISTS Q")
    still_usable(loaded)


def test_group_by_rules(loaded):
    with pytest.raises(trdb.ProgrammingError, match='"A.j" must appear in the GROUP BY'):
        loaded.execute("SELECT A.i, A.j, SUM(A.v) FROM A GROUP BY A.i")
    with pytest.raises(trdb.ProgrammingError, match="GROUP BY takes key expressions"):
        loaded.execute("SELECT SUM(A.v) FROM A GROUP BY A.v")


def test_bad_layouts(loaded):
    with pytest.raises(trdb.ProgrammingError, match="different ranks"):
        loaded.execute("CREATE TENSOR Q SHAPE (4, 4) TILE (2)")
    with pytest.raises(trdb.ProgrammingError, match="positive"):
        loaded.execute("CREATE TENSOR Q SHAPE (4, 4) TILE (0, 2)")
    with pytest.raises(trdb.DataError, match="outside the tile grid"):
        loaded.execute("INSERT INTO A VALUES (5, 0, ?)", [np.ones((4, 4), np.float32)])


def test_tensors_whose_edge_tiles_cannot_meet_are_refused_when_bound_and_connection_survives(loaded):
    loaded.execute("CREATE TENSOR B SHAPE (6, 6) TILE (4, 4) FILL ONES")
    with pytest.raises(trdb.ProgrammingError, match=r"\*: the whole tensors do not line up"):
        loaded.execute("SELECT A.i, A.j, A.v * B.v FROM A JOIN B ON A.i = B.i AND A.j = B.j")
    still_usable(loaded)


def test_plain_sql_errors_come_from_duckdb(cur):
    cur.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(trdb.ProgrammingError, match="y"):
        cur.execute("SELECT y FROM t")
    with pytest.raises(trdb.IntegrityError):
        cur.execute("CREATE TABLE u (x INTEGER PRIMARY KEY)")
        cur.execute("INSERT INTO u VALUES (1), (1)")


def test_sum_never_broadcasts_tiles_of_different_shapes(cur):
    cur.execute("CREATE TENSOR X FROM ? TILE (2, 2)", [np.ones((3, 5), np.float32)])
    with pytest.raises(trdb.DataError, match=r"SUM: tiles of one group have shapes"):
        cur.execute("SELECT X.j, SUM(X.v) FROM X GROUP BY X.j")


def test_order_by_a_tensor_is_refused(loaded):
    with pytest.raises(trdb.ProgrammingError, match="tiles of many values have no order"):
        loaded.execute("SELECT A.i, A.j, A.v FROM A ORDER BY A.v")


def test_unkeyed_axes_must_be_whole(cur):
    with pytest.raises(trdb.ProgrammingError, match="axis 1 has no key"):
        cur.execute("CREATE TENSOR R (r) SHAPE (4, 4) TILE (2, 2) FILL ONES")
    cur.execute("CREATE TENSOR R (r) SHAPE (4, 4) TILE (2, 4) FILL ONES")
    np.testing.assert_array_equal(cur.execute("SELECT * FROM R").fetch_tensor(), np.ones((4, 4)))


def test_plain_view_cannot_shadow_a_tensor(loaded):
    with pytest.raises(trdb.IntegrityError, match='"A" already exists'):
        loaded.execute("CREATE VIEW A AS SELECT 42 AS answer")


def test_plain_sql_with_a_tensor_named_word_still_runs(loaded):
    loaded.execute("CREATE TABLE t (a INTEGER)")
    loaded.execute("INSERT INTO t VALUES (1)")
    assert loaded.execute("SELECT a FROM t").fetchall() == [(1,)]


def _plain_sql_failing_in_a_transaction(cur, monkeypatch, exception: BaseException):
    """A transaction that inserted a row, then plain SQL that trql cannot parse, running into `exception`."""
    from trdb.session.session import Session
    cur.execute("CREATE TABLE t (x INTEGER)")
    cur.execute("BEGIN")
    cur.execute("INSERT INTO t VALUES (1)")

    def failing(self, *args):
        raise exception
    monkeypatch.setattr(Session, "_plain_sql", failing)
    try:
        cur.execute("INSERT INTO t BY NAME SELECT 2 AS x")
    finally:
        monkeypatch.undo()


def _aborted_then_rolled_back(cur):
    with pytest.raises(trdb.OperationalError, match="current transaction is aborted"):
        cur.execute("SELECT x FROM t")
    cur.execute("ROLLBACK")
    assert cur.execute("SELECT count(*) FROM t").fetchall() == [(0,)]


def test_a_bug_running_plain_sql_trql_cannot_parse_is_an_internal_error_and_aborts_the_transaction(
        loaded, monkeypatch):
    with pytest.raises(trdb.InternalError, match="internal error: RuntimeError: a bug"):
        _plain_sql_failing_in_a_transaction(loaded, monkeypatch, RuntimeError("a bug"))
    _aborted_then_rolled_back(loaded)
    still_usable(loaded)


def test_ctrl_c_in_plain_sql_trql_cannot_parse_aborts_the_explicit_transaction(loaded, monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        _plain_sql_failing_in_a_transaction(loaded, monkeypatch, KeyboardInterrupt())
    _aborted_then_rolled_back(loaded)


def test_running_out_of_memory_while_parsing_fails_the_statement_cleanly(cur, monkeypatch):
    """A MemoryError in the parser escaped as it was (found by the fuzzer under a tight address-space
    limit): it is an OperationalError like any statement's, and the session goes on."""
    import trdb.session.session

    real = trdb.session.session.parse

    def short_of_memory(text):
        raise MemoryError()
    monkeypatch.setattr(trdb.session.session, "parse", short_of_memory)
    with pytest.raises(trdb.OperationalError, match="out of memory") as failed:
        cur.execute("SELECT 1 + 2 AS v")
    assert "parsing" in failed.value.hint
    monkeypatch.setattr(trdb.session.session, "parse", real)
    cur.execute("CREATE TENSOR T SHAPE (2, 2) TILE (2, 2) FILL ONES")
    assert cur.execute("SELECT SUM(v) AS v FROM T").fetchone()[0].sum() == 4


@pytest.mark.on_cpu
@pytest.mark.parametrize("fetch", ["fetchall", "fetchnumpy", "fetch_arrow", "fetch_tensor"])
def test_running_out_of_memory_reading_a_spilled_result_back_keeps_its_rows(cur, monkeypatch, fetch):
    """A MemoryError reading a spilled result back escaped as it was (found by the fuzzer under a tight
    address-space limit): the fetch is an OperationalError, and every row is still there to fetch."""
    import trdb.storage.spill

    data = np.arange(512 * 512, dtype=np.float64).reshape(512, 512)
    cur.execute("SET memory_limit = '8MB'")
    cur.execute("CREATE TENSOR S FROM ? TILE (8, 512)", [data])
    cur.execute("SELECT i, j, v * 2 AS v FROM S")
    first = cur.fetchmany(3)
    assert cur._reader.rows._files, "the result was meant to spill"
    real, calls = trdb.storage.spill._read_value, []

    def short_of_memory_once(source, path):
        calls.append(1)
        if len(calls) == 20:
            raise MemoryError()
        return real(source, path)
    monkeypatch.setattr(trdb.storage.spill, "_read_value", short_of_memory_once)
    with pytest.raises(trdb.OperationalError, match="out of memory|more than this process can allocate"):
        getattr(cur, fetch)()
    assert len(calls) >= 20
    rows = sorted(first + cur.fetchall(), key=lambda row: row[0])
    assert [row[0] for row in rows] == list(range(64))
    np.testing.assert_array_equal(np.concatenate([row[2] for row in rows]), data * 2)
