"""COPY TO Parquet (tile and long form), CSV and npy read back by pandas, pyarrow and numpy; COPY FROM; paths."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse

import trdb
from helpers.small_tensor import A, connection_with_a  # noqa: F401 (the `con` fixture)


def _long_dense(frame: pd.DataFrame, shape) -> np.ndarray:
    out = np.zeros(shape, np.float32)
    out[frame["i"].to_numpy(), frame["j"].to_numpy()] = frame["v"].to_numpy()
    return out


def test_parquet_tile_form_is_fetch_arrows_layout(con, tmp_path):
    path = tmp_path / "a.parquet"
    assert con.execute(f"COPY A TO '{path}'").rowcount == 6  # the tiles written (no result set, as PEP 249 says)
    table = pq.read_table(path)
    assert table.schema == con.execute("SELECT * FROM A").fetch_arrow().schema
    for row in table.to_pylist():
        tile = np.array(row["v"], np.float32).reshape(2, 2)[:row["v_shape"][0], :row["v_shape"][1]]
        np.testing.assert_array_equal(tile, A[row["i"] * 2:row["i"] * 2 + 2, row["j"] * 2:row["j"] * 2 + 2])


def test_long_forms_csv_and_npy_read_back_equal(con, tmp_path):
    con.execute(f"COPY A TO '{tmp_path / 'long.parquet'}' (FORMAT parquet, LAYOUT long)")
    np.testing.assert_array_equal(_long_dense(pd.read_parquet(tmp_path / "long.parquet"), A.shape), A)
    assert con.execute(f"COPY (SELECT A.i, A.j, A.v * 2 AS v FROM A) TO '{tmp_path / 'a.csv'}'").rowcount == 15
    np.testing.assert_array_equal(_long_dense(pd.read_csv(tmp_path / "a.csv"), A.shape), 2 * A)
    con.execute(f"COPY (SELECT * FROM A WHERE A.i = 1) TO '{tmp_path / 'a.npy'}' (FORMAT npy)")
    expected = A.copy()
    expected[:2] = 0  # absent tiles are zeros in the dense array
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy", allow_pickle=False), expected)


def test_sparse_long_form_has_no_zeros(tmp_path):
    con = trdb.connect(workers=1)
    matrix = scipy.sparse.random(300, 300, density=0.001, format="csr", dtype=np.float32, random_state=1)
    con.execute("CREATE TENSOR S FROM ? TILE (128, 128)", [matrix])
    assert con.execute(f"COPY S TO '{tmp_path / 's.csv'}'").rowcount == matrix.nnz
    frame = pd.read_csv(tmp_path / "s.csv")
    got = scipy.sparse.coo_matrix((frame["v"].astype(np.float32), (frame["i"], frame["j"])), shape=(300, 300)).toarray()
    np.testing.assert_array_equal(got, matrix.toarray())


@pytest.mark.parametrize("file, options", [("t.parquet", ""), ("l.parquet", "(LAYOUT long)"),
                                           ("c.csv", ""), ("n.npy", "")])
def test_copy_from_reads_back_what_copy_wrote(con, tmp_path, file, options):
    path = tmp_path / file
    con.execute(f"COPY A TO '{path}' {options}")
    con.execute("CREATE TENSOR B SHAPE (3, 5) TILE (2, 2)")
    con.execute(f"COPY B FROM '{path}'")
    assert con.sql("SELECT * FROM B").tensor().tobytes() == A.tobytes()
    if file.endswith(".parquet") and not options:
        with pytest.raises(trdb.IntegrityError, match="already exists"):
            con.execute(f"COPY B FROM '{path}'")  # tiles are added, never overwritten
    else:
        with pytest.raises(trdb.IntegrityError, match="already holds tiles"):
            con.execute(f"COPY B FROM '{path}'")
    assert con.sql("SELECT * FROM B").tensor().tobytes() == A.tobytes()  # the failed COPY left it as it was


def test_paths_are_checked_and_plain_tables_copy_as_in_duckdb(con, tmp_path):
    for path, error in ((tmp_path / "missing" / "a.parquet", trdb.OperationalError),
                        (tmp_path, trdb.OperationalError), ("s3://bucket/a.parquet", trdb.NotSupportedError),
                        ("", trdb.ProgrammingError)):
        with pytest.raises(error):
            con.execute(f"COPY A TO '{path}'")
    with pytest.raises(trdb.OperationalError, match="no such file"):
        con.execute(f"COPY A FROM '{tmp_path / 'none.parquet'}'")
    with pytest.raises(trdb.ProgrammingError, match="long form only"):
        con.execute(f"COPY A TO '{tmp_path / 'a.csv'}' (LAYOUT tiles)")
    quoted = tmp_path / "it's here.parquet"  # a quote in a path is just a character
    con.execute("COPY A TO '" + str(quoted).replace("'", "''") + "'")
    assert pq.read_table(quoted).num_rows == 6
    con.execute("CREATE TABLE t AS SELECT range AS x FROM range(3)")
    con.execute(f"COPY t TO '{tmp_path / 't.csv'}' (HEADER)")  # an ordinary table: DuckDB's COPY
    assert pd.read_csv(tmp_path / "t.csv")["x"].tolist() == [0, 1, 2]
    with pytest.raises(trdb.DataError, match="not one tensor"):  # four 0-d tiles under the key ()
        con.execute(f"COPY (SELECT SUMSQ(A.v) AS s FROM A) TO '{tmp_path / 's.csv'}'")
    assert not (tmp_path / "s.csv").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # failed writes left no temporary file


def test_copy_reads_a_spilled_result_batch_by_batch(tmp_path):
    con = trdb.connect(workers=1, memory_limit="64MB")
    big = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB, 256 tiles
    con.execute("CREATE TENSOR G FROM ? TILE (64, 64)", [big])
    con.execute(f"COPY (SELECT G.i, G.j, G.v * 2 AS v FROM G) TO '{tmp_path / 'g.npy'}'")
    np.testing.assert_array_equal(np.load(tmp_path / "g.npy"), big * 2)
    table = con.execute("SELECT * FROM G").fetch_arrow()
    assert table.num_rows == 256 and "v_shape" not in table.column_names


def test_export_and_import_database_round_trip_bit_for_bit(tmp_path):
    con = trdb.connect(workers=1)
    values = np.array([[np.nan, -0.0, 1e-40, np.inf], [1.5, -2.5, 3.25, 0.0]], np.float64)
    con.execute("CREATE TENSOR F64 FROM ? TILE (1, 3)", [values])
    con.execute("CREATE TENSOR I64 FROM ? TILE (2)", [np.array([2 ** 62, -7, 0, 5], np.int64)])
    matrix = scipy.sparse.random(200, 200, density=0.01, format="csr", dtype=np.float32, random_state=2)
    con.execute("CREATE TENSOR S FROM ? TILE (64, 64)", [matrix])
    con.execute("CREATE TABLE people (name VARCHAR, age INTEGER)")
    con.execute("INSERT INTO people VALUES ('a''b', 30), (NULL, 40)")
    con.execute("CREATE VIEW adults AS SELECT name FROM people WHERE age > 35")
    con.execute("CREATE VIEW doubled AS SELECT S.i, S.j, S.v * 2 AS v FROM S")
    folder = tmp_path / "it's a backup"
    con.execute("EXPORT DATABASE '" + str(folder).replace("'", "''") + "'")
    restored = trdb.connect(str(tmp_path / "restored.trdb"), workers=1)
    restored.execute("IMPORT DATABASE '" + str(folder).replace("'", "''") + "'")
    for name in ("F64", "I64", "S", "doubled"):
        want, got = con.sql(f"SELECT * FROM {name}"), restored.sql(f"SELECT * FROM {name}")
        assert got.tensor().tobytes() == want.tensor().tobytes(), name
    assert restored.execute("SHOW TENSORS").fetchall() == con.execute("SHOW TENSORS").fetchall()
    assert restored.execute("SELECT * FROM people ORDER BY age").fetchall() == [("a'b", 30), (None, 40)]
    assert restored.execute("SELECT * FROM adults").fetchall() == [(None,)]
    with pytest.raises(trdb.IntegrityError):  # every name is there already: nothing is imported twice
        restored.execute("IMPORT DATABASE '" + str(folder).replace("'", "''") + "'")
    assert restored.execute("SELECT count(*) FROM people").fetchall() == [(2,)]


def test_export_and_import_keep_adams_state_so_training_goes_on_alike(tmp_path):
    def train(con, steps):
        con.execute(f"MINIMIZE loss WRT (W) WITH (optimizer = 'adam', learning_rate = 0.1, steps = {steps})")

    con = trdb.connect(str(tmp_path / "a.trdb"), workers=1)
    con.execute("CREATE TENSOR W SHAPE (4, 3) TILE (2, 3) FILL RANDOM_NORMAL(0, 1, 5)")
    con.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(W.v - 1)) AS v FROM W")
    train(con, 3)
    con.execute(f"EXPORT DATABASE '{tmp_path / 'backup'}'")
    restored = trdb.connect(str(tmp_path / "b.trdb"), workers=1)
    restored.execute(f"IMPORT DATABASE '{tmp_path / 'backup'}'")
    assert restored.execute("DESCRIBE W").fetchall() == con.execute("DESCRIBE W").fetchall()  # the moments
    train(con, 2)
    train(restored, 2)  # step 4 and 5 of Adam in both: the bias correction needs the step count
    assert restored.sql("SELECT * FROM W").tensor().tobytes() == con.sql("SELECT * FROM W").tensor().tobytes()


def test_copy_refuses_what_duckdb_refuses_with_external_access_off(tmp_path):
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    (tmp_path / "ok").mkdir()
    con.execute(f"SET allowed_directories = ['{tmp_path / 'ok'}']")
    con.execute("SET enable_external_access = false")
    for statement in (f"COPY A TO '{tmp_path / 'a.csv'}'", f"COPY A TO '{tmp_path / 'ok' / '..' / 'a.csv'}'",
                      f"EXPORT DATABASE '{tmp_path / 'backup'}'"):
        with pytest.raises(trdb.OperationalError, match="disabled by configuration"):
            con.execute(statement)
    assert con.execute(f"COPY A TO '{tmp_path / 'ok' / 'a.csv'}'").rowcount == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok"]


@pytest.mark.parametrize("layout", ["tiles", "long"])
def test_many_small_tiles_copy_as_stacks_and_repeated_keys_are_refused(tmp_path, layout):
    """20,000 tiles of 1 x 4 (column batches): written from their stacks and key arrays, read back equal; a result
    with two tuples under one key, found among a batch's key arrays or across batches, is refused by name."""
    rows = np.random.default_rng(2).standard_normal((20_000, 4)).astype(np.float32)
    with trdb.connect() as con:
        con.execute("CREATE TENSOR E FROM ? TILE (1, 4)", [rows])
        path = tmp_path / f"e_{layout}.parquet"
        con.execute(f"COPY E TO '{path}' (FORMAT parquet, LAYOUT '{layout}')")
        con.execute(f"CREATE TENSOR F FROM '{path}'")
        np.testing.assert_array_equal(con.execute("SELECT * FROM F").fetch_tensor(), rows)
        for query in ("SELECT E.i % 7 AS i, E.j, E.v FROM E", "SELECT E.i // 5000 AS i, E.j, E.v FROM E",
                      "SELECT E.i, E.j, E.v FROM E UNION ALL SELECT E.i, E.j, E.v FROM E WHERE E.i = 3"):
            with pytest.raises(trdb.DataError, match="two tuples under key"):
                con.execute(f"COPY ({query}) TO '{tmp_path / 'x.parquet'}'")
