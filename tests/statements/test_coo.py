"""CREATE TENSOR ... FROM COO from Parquet, CSV, tables, Arrow, pandas and scipy.sparse, against numpy."""
from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import scipy.sparse

import trdb
from trdb.ingest import coo_buckets, tiling
from trdb.statements import coo

SHAPE, TILE = (23, 17), (5, 4)  # ragged edge tiles on both axes


def random_entries(shape, count, seed=0, duplicates=10):
    """COO entries with `duplicates` coordinates repeated; the dense oracle sums them."""
    rng = np.random.default_rng(seed)
    index = [rng.integers(0, n, count) for n in shape]
    for axis in index:
        axis[-duplicates:] = axis[:duplicates]
    return index, rng.standard_normal(count)


def dense(shape, index, values, dtype=np.float64):
    out = np.zeros(shape, dtype=np.float64)
    np.add.at(out, tuple(index), values)
    return out.astype(dtype)


def nonempty_tiles(array, tile):
    grid = [math.ceil(n / t) for n, t in zip(array.shape, tile)]
    blocks = np.zeros(grid, dtype=bool)
    for key in np.ndindex(*grid):
        block = array[tuple(slice(k * t, (k + 1) * t) for k, t in zip(key, tile))]
        blocks[key] = np.count_nonzero(block) > 0
    return int(blocks.sum())


def entries_table(index, values, names=("r", "c", "v")):
    return pa.table({name: column for name, column in zip(names, [*index, values])})


def check(cur, name, expected, tile=TILE):
    got = cur.execute(f"SELECT * FROM {name}").fetch_tensor(shape=expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert cur.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0] == nonempty_tiles(expected, tile)


def tensor_names(cur):
    return [row[0] for row in cur.execute("SHOW TENSORS").fetchall()]


# ------------------------------------------------------------ sources


def test_parquet_with_ragged_tiles_and_duplicates(cur, tmp_path):
    index, values = random_entries(SHAPE, 60)
    path = tmp_path / "entries.parquet"
    pq.write_table(entries_table(index, values), path)
    cur.execute(f"CREATE TENSOR A FROM COO '{path}' (r, c, v) SHAPE (23, 17) TILE (5, 4)")
    check(cur, "A", dense(SHAPE, index, values))
    assert cur.execute("SELECT * FROM A").fetch_tensor(shape=SHAPE).dtype == np.float32


def test_csv(cur, tmp_path):
    index, values = random_entries(SHAPE, 50, seed=1)
    path = tmp_path / "entries.csv"
    pacsv.write_csv(entries_table(index, values, ("row", "col", "weight")), path)
    cur.execute(f"CREATE TENSOR A FROM COO '{path}' (row, col, weight) SHAPE (23, 17) TILE (5, 4) DTYPE float64")
    check(cur, "A", dense(SHAPE, index, values))


def test_ordinary_table(cur, tmp_path):
    index, values = random_entries(SHAPE, 40, seed=2)
    path = tmp_path / "entries.parquet"
    pq.write_table(entries_table(index, values), path)
    cur.execute(f"CREATE TABLE edges AS SELECT r AS src, c AS dst, v AS w FROM read_parquet('{path}')")
    cur.execute("CREATE TENSOR A FROM COO edges (src, dst, w) SHAPE (23, 17) TILE (5, 4)")
    check(cur, "A", dense(SHAPE, index, values))
    assert cur.execute("SELECT count(*) FROM edges").fetchone() == (40,)  # the source is untouched


def test_pyarrow_table(cur):
    index, values = random_entries(SHAPE, 70, seed=3)
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (23, 17) TILE (5, 4)", [entries_table(index, values)])
    check(cur, "A", dense(SHAPE, index, values))


def test_pandas_dataframe(cur):
    pd = pytest.importorskip("pandas")
    index, values = random_entries(SHAPE, 70, seed=4)
    frame = pd.DataFrame({"R": index[0].astype(np.int32), "C": index[1], "value": values})
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, value) SHAPE (23, 17) TILE (5, 4)", [frame])  # names fold
    check(cur, "A", dense(SHAPE, index, values))


def test_scipy_sparse_with_duplicates(cur):
    index, values = random_entries(SHAPE, 80, seed=5)
    matrix = scipy.sparse.coo_matrix((values, (index[0], index[1])), shape=SHAPE)
    cur.execute("CREATE TENSOR A FROM COO ? (row, col, data) SHAPE (23, 17) TILE (5, 4) DTYPE float64", [matrix])
    check(cur, "A", dense(SHAPE, index, values))
    cur.execute("CREATE TENSOR B FROM COO ? (i, j, x) SHAPE (23, 17) TILE (5, 4)", [matrix.tocsr()])
    check(cur, "B", dense(SHAPE, index, values))


def test_three_dimensional(cur):
    shape, tile = (7, 9, 5), (3, 4, 2)
    index, values = random_entries(shape, 90, seed=6)
    table = entries_table(index, values, ("a", "b", "c", "v"))
    cur.execute("CREATE TENSOR T FROM COO ? (a, b, c, v) SHAPE (7, 9, 5) TILE (3, 4, 2)", [table])
    check(cur, "T", dense(shape, index, values), tile)
    # two keys: the last axis is whole inside every tile
    cur.execute("CREATE TENSOR U (x, y) FROM COO ? (a, b, c, v) SHAPE (7, 9, 5) TILE (3, 4, 5)", [table])
    check(cur, "U", dense(shape, index, values), (3, 4, 5))
    assert cur.execute("SELECT U.x, U.y FROM U ORDER BY x, y LIMIT 1").fetchone() == (0, 0)


def test_duplicates_that_cancel_and_explicit_zeros_store_nothing(cur):
    table = pa.table({"r": [0, 0, 9, 12, 12], "c": [0, 0, 9, 3, 3], "v": [2.5, -2.5, 0.0, 1.0, 1.0]})
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (13, 13) TILE (4, 4)", [table])
    expected = np.zeros((13, 13))
    expected[12, 3] = 2.0
    check(cur, "A", expected, (4, 4))
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone() == (1,)


def test_empty_source_stores_no_tuples(cur):
    table = pa.table({"r": pa.array([], pa.int64()), "c": pa.array([], pa.int64()), "v": pa.array([], pa.float64())})
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (10, 10) TILE (4, 4)", [table])
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone() == (0,)
    assert "A" in tensor_names(cur)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "bool", "float16"])
def test_dtypes(cur, dtype):
    table = pa.table({"r": [0, 1, 1, 5], "c": [0, 2, 2, 4], "v": [3, 1, 2, 7]})
    cur.execute(f"CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (6, 5) TILE (4, 4) DTYPE {dtype}", [table])
    expected = dense((6, 5), [np.array([0, 1, 1, 5]), np.array([0, 2, 2, 4])], [3, 1, 2, 7], np.dtype(dtype))
    got = cur.execute("SELECT * FROM A").fetch_tensor(shape=(6, 5))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expected)


def test_integral_float_indices_and_boolean_values(cur):
    table = pa.table({"r": [0.0, 3.0], "c": [1.0, 2.0], "v": [True, True]})
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (4, 4) TILE (2, 2)", [table])
    expected = np.zeros((4, 4), np.float32)
    expected[0, 1] = expected[3, 2] = 1
    check(cur, "A", expected, (2, 2))


def test_many_chunks(cur, monkeypatch):
    monkeypatch.setattr(tiling, "CHUNK_BYTES", 200)  # a few tiles per insert
    shape = (64, 48)
    index, values = random_entries(shape, 400, seed=7)
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (64, 48) TILE (6, 5)", [entries_table(index, values)])
    check(cur, "A", dense(shape, index, values), (6, 5))


@pytest.mark.parametrize("buckets", [3, 256])
def test_entries_bucketed_through_spill_files(cur, monkeypatch, tmp_path, buckets):
    """Buckets of a few tiles each (at most `buckets` of them), spilled, each sorted on its own; ragged
    edge tiles, duplicates across batches of the read, the spill files gone afterwards."""
    monkeypatch.setattr(coo_buckets, "MAX_BUCKETS", buckets)
    monkeypatch.setattr(coo_buckets, "READ_ROWS", 97)
    monkeypatch.setattr(coo, "ENTRY_BATCH_BYTES", 50 * coo._ENTRY_BYTES)
    cur.execute(f"SET temp_directory = '{tmp_path}'")
    shape = (64, 48)
    index, values = random_entries(shape, 3000, seed=11, duplicates=300)
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (64, 48) TILE (6, 5)", [entries_table(index, values)])
    check(cur, "A", dense(shape, index, values), (6, 5))
    assert not [f for _, _, files in os.walk(tmp_path) for f in files if f.startswith("coo")]


def test_leaves_no_temporary_table(cur):
    before = cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (4, 4) TILE (2, 2)",
                [pa.table({"r": [1], "c": [1], "v": [1.0]})])
    assert cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone()[0] == before[0] + 1  # the tile table


# ------------------------------------------------------------ bad input: a clear error, nothing stored


def fails(cur, error, pattern, sql, params=()):
    tables = cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
    with pytest.raises(error, match=pattern):
        cur.execute(sql, list(params))
    assert "T" not in tensor_names(cur)
    assert cur.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == tables
    with pytest.raises(trdb.ProgrammingError, match='"T" does not exist'):
        cur.execute("SELECT * FROM T")


COO = "CREATE TENSOR T FROM COO ? (r, c, v) SHAPE (10, 8) TILE (4, 4)"


def test_index_too_large(cur):
    table = pa.table({"r": [1, 2, 3], "c": [0, 8, 9], "v": [1.0, 2.0, 3.0]})
    fails(cur, trdb.DataError, r'index column "c" holds 9, out of range: axis 1 of SHAPE \(10, 8\) has size 8.*'
                               r'\(2 entries out of range\)', COO, [table])


def test_negative_index(cur):
    table = pa.table({"r": [1, -3, 3], "c": [0, 1, 2], "v": [1.0, 2.0, 3.0]})
    fails(cur, trdb.DataError, r'index column "r" holds -3, out of range.*SHAPE \(10, 8\)', COO, [table])


def test_fractional_index(cur):
    table = pa.table({"r": [1.0, 2.5], "c": [0, 1], "v": [1.0, 2.0]})
    fails(cur, trdb.DataError, r'index column "r" holds 2.5, which is not an integer', COO, [table])


def test_string_index_column(cur, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("r,c,v\n1,a,1.0\n2,b,2.0\n")
    fails(cur, trdb.DataError, r'index column "c" has type VARCHAR: indices must be integers',
          f"CREATE TENSOR T FROM COO '{path}' (r, c, v) SHAPE (10, 8) TILE (4, 4)")


def test_nan_index(cur):
    table = pa.table({"r": [1.0, float("nan")], "c": [0, 1], "v": [1.0, 2.0]})
    fails(cur, trdb.DataError, r'index column "r" holds NaN \(1 entry\)', COO, [table])


def test_nan_index_from_pandas(cur):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"r": [1.0, np.nan], "c": [0, 1], "v": [1.0, 2.0]})  # pandas' NaN is a missing value
    fails(cur, trdb.DataError, r'index column "r" has 1 NULL \(missing\) value', COO, [frame])


def test_null_index_and_null_value(cur):
    fails(cur, trdb.DataError, r'index column "c" has 1 NULL', COO,
          [pa.table({"r": [1, 2], "c": [0, None], "v": [1.0, 2.0]})])
    fails(cur, trdb.DataError, r'value column "v" has 1 NULL', COO,
          [pa.table({"r": [1, 2], "c": [0, 1], "v": [1.0, None]})])


def test_value_column_of_strings(cur):
    fails(cur, trdb.DataError, r'value column "v" has type VARCHAR', COO,
          [pa.table({"r": [1], "c": [0], "v": ["x"]})])


def test_missing_column_suggests_the_nearest(cur):
    table = pa.table({"row": [1], "col": [0], "value": [1.0]})
    with pytest.raises(trdb.ProgrammingError, match=r'column "colum" does not exist in parameter 1') as info:
        cur.execute("CREATE TENSOR T FROM COO ? (row, colum, value) SHAPE (10, 8) TILE (4, 4)", [table])
    assert 'did you mean "col"?' in str(info.value)
    fails(cur, trdb.ProgrammingError, r'(?s)column "zzz" does not exist.*HINT: its columns are row, col, value',
          "CREATE TENSOR T FROM COO ? (row, col, zzz) SHAPE (10, 8) TILE (4, 4)", [table])


def test_wrong_number_of_columns(cur):
    table = pa.table({"r": [1], "c": [0], "v": [1.0]})
    fails(cur, trdb.ProgrammingError, r"names 1 index column\(s\) and a value column, but SHAPE \(10, 8\) has 2",
          "CREATE TENSOR T FROM COO ? (r, v) SHAPE (10, 8) TILE (4, 4)", [table])
    fails(cur, trdb.ProgrammingError, r"scipy.sparse matrix: FROM COO takes its \(row, col, data\) as 3 columns",
          "CREATE TENSOR T FROM COO ? (a, b, c, v) SHAPE (10, 8, 2) TILE (4, 4, 2)",
          [scipy.sparse.eye(4, format="csr")])


def test_missing_file(cur, tmp_path):
    fails(cur, trdb.OperationalError, r"cannot read '.*nope.parquet': no such file",
          f"CREATE TENSOR T FROM COO '{tmp_path / 'nope.parquet'}' (r, c, v) SHAPE (10, 8) TILE (4, 4)")
    fails(cur, trdb.ProgrammingError, r"cannot tell the format of 'edges.json'",
          "CREATE TENSOR T FROM COO 'edges.json' (r, c, v) SHAPE (10, 8) TILE (4, 4)")


def test_bad_sources(cur):
    fails(cur, trdb.ProgrammingError, r"FROM COO \? takes a pyarrow Table.*got ndarray", COO, [np.eye(3)])
    cur.execute("CREATE TABLE edges (r BIGINT, c BIGINT, v DOUBLE)")
    fails(cur, trdb.ProgrammingError, r'table "edgs" does not exist(.|\n)*did you mean "edges"',
          "CREATE TENSOR T FROM COO edgs (r, c, v) SHAPE (10, 8) TILE (4, 4)")
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    fails(cur, trdb.ProgrammingError, r'"A" is a tensor relation',
          "CREATE TENSOR T FROM COO A (i, j, v) SHAPE (4, 4) TILE (2, 2)")


def test_existing_name(cur):
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    with pytest.raises(trdb.IntegrityError, match='"A" already exists'):
        cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (4, 4) TILE (2, 2)",
                    [pa.table({"r": [1], "c": [0], "v": [1.0]})])
    assert cur.execute("SELECT COUNT(*) FROM A").fetchone() == (4,)


def test_error_inside_a_transaction_rolls_back(con):
    cur = con.cursor()
    cur.execute("BEGIN")
    cur.execute("CREATE TENSOR A FROM COO ? (r, c, v) SHAPE (4, 4) TILE (2, 2)",
                [pa.table({"r": [1], "c": [0], "v": [1.0]})])
    with pytest.raises(trdb.DataError, match="out of range"):
        cur.execute("CREATE TENSOR T FROM COO ? (r, c, v) SHAPE (4, 4) TILE (2, 2)",
                    [pa.table({"r": [4], "c": [0], "v": [1.0]})])
    cur.execute("ROLLBACK")
    assert tensor_names(cur) == []


def test_file_that_is_not_parquet(cur, tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"not a parquet file")
    fails(cur, trdb.DataError, r"cannot read '.*broken.parquet': ",
          f"CREATE TENSOR T FROM COO '{path}' (r, c, v) SHAPE (10, 8) TILE (4, 4)")
