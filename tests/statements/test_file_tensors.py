"""CREATE TENSOR name FROM 'file' reads back what COPY ... TO wrote: Parquet tiles or long form with the shape and
tile they record; a CSV file is refused with the FROM COO statement that reads it."""
import numpy as np
import pyarrow.parquet as pq
import pytest

import trdb


@pytest.fixture
def con():
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR A (r, c) SHAPE (9, 7) TILE (4, 4) DTYPE float64 FILL RANDOM_NORMAL(0, 1, 1)")
    con.execute("CREATE TENSOR S SHAPE (20, 20) TILE (4, 4)")  # sparse: its last tiles are absent
    con.execute("INSERT INTO S VALUES (1, 2, ?)", [np.arange(16, dtype=np.float32).reshape(4, 4)])
    con.execute("CREATE TENSOR V SHAPE (10) TILE (3) DTYPE int32 FILL CONSTANT(7)")
    con.execute("CREATE TENSOR Z SHAPE () TILE () FILL CONSTANT(2.5)")
    con.execute("CREATE TENSOR K (i) SHAPE (6, 5) TILE (4, 5) FILL ONES")  # the second axis has no key
    yield con
    con.close()


def dense(con, name):
    return con.execute(f"SELECT * FROM {name}").fetch_tensor()


def describe(con, name):
    rows = con.execute(f"DESCRIBE {name}").fetchall()
    return [r[0] for r in rows[:-1]], rows[-1][3], rows[-1][4], rows[-1][1]


@pytest.mark.parametrize("name", ["A", "S", "V", "Z", "K"])
@pytest.mark.parametrize("layout", ["tiles", "long"])
def test_what_copy_wrote_reads_back_whole(con, tmp_path, name, layout):
    path = tmp_path / f"{name}.parquet"
    con.execute(f"COPY {name} TO '{path}' (LAYOUT {layout})")
    con.execute(f"CREATE TENSOR back FROM '{path}'")
    np.testing.assert_array_equal(dense(con, "back"), dense(con, name))
    original, read = describe(con, name), describe(con, "back")
    assert read[1:] == original[1:]  # shape, tile, dtype
    if layout == "tiles":
        assert read[0] == original[0]  # the key names too


def test_a_file_without_recorded_layout_gives_the_extent_of_its_tiles(con, tmp_path):
    path = tmp_path / "a.parquet"
    con.execute(f"COPY A TO '{path}'")
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata(None), tmp_path / "bare.parquet")  # as fetch_arrow() would give
    con.execute(f"CREATE TENSOR back FROM '{tmp_path / 'bare.parquet'}'")
    np.testing.assert_array_equal(dense(con, "back"), dense(con, "A"))
    assert describe(con, "back")[1:3] == ("[9, 7]", "[4, 4]")


def test_a_csv_file_is_refused_with_the_statement_that_reads_it(con, tmp_path):
    path = tmp_path / "a.csv"
    con.execute(f"COPY A TO '{path}'")
    with pytest.raises(trdb.ProgrammingError) as failure:
        con.execute(f"CREATE TENSOR back FROM '{path}'")
    assert "is a CSV file" in str(failure.value) and "^" in str(failure.value)
    statement = failure.value.hint.split(" reads its rows")[0]
    assert statement == f"CREATE TENSOR back FROM COO '{path}' (r, c, v) SHAPE (9, 7) TILE (9, 7)"
    con.execute(statement + " DTYPE float64")
    np.testing.assert_allclose(dense(con, "back"), dense(con, "A"), rtol=1e-6)


def test_a_tile_other_than_the_files_is_refused_and_nothing_is_made(con, tmp_path):
    path = tmp_path / "a.parquet"
    con.execute(f"COPY A TO '{path}'")
    with pytest.raises(trdb.ProgrammingError, match=r"holds tiles of \(4, 4\), not the TILE \(2, 2\) given"):
        con.execute(f"CREATE TENSOR back FROM '{path}' TILE (2, 2)")
    with pytest.raises(trdb.ProgrammingError, match='"back" does not exist'):
        con.execute("SELECT * FROM back")


def test_or_replace_and_dtype_and_a_name_that_hides_the_format(con, tmp_path):
    path = tmp_path / "a.parquet"
    con.execute(f"COPY A TO '{path}'")
    (tmp_path / "a.data").write_bytes(path.read_bytes())  # a Parquet file by its first bytes
    con.execute(f"CREATE OR REPLACE TENSOR A FROM '{tmp_path / 'a.data'}' DTYPE float32")
    assert dense(con, "A").dtype == np.float32 and describe(con, "A")[1] == "[9, 7]"


def test_a_file_that_is_not_parquet_is_a_data_error(con, tmp_path):
    (tmp_path / "bad.parquet").write_text("hello")
    with pytest.raises(trdb.DataError, match="is not a parquet file"):
        con.execute(f"CREATE TENSOR back FROM '{tmp_path / 'bad.parquet'}'")


@pytest.mark.parametrize("statement,part,message", [
    ("CREATE TENSOR T SHAPE (2, 2) TILE (2, 2) FILL CONSTANT('x')", "'x'", "takes numbers, not the string 'x'"),
    ("CREATE TENSOR T SHAPE (2, 2) TILE (2, 2) FILL RANDOM_UNIFORM(0, NULL)", "NULL", "not NULL"),
    ("CREATE TENSOR T SHAPE (2, 2) TILE (2, 2) FILL RANDOM_NORMAL(0, 1, -4)", "-4", "seed must be a non-negative"),
    ("CREATE TENSOR T SHAPE (2, 2) TILE (2, 2) FILL RANDOM_NORMAL(0, -1)", "-1", "standard deviation must be >= 0"),
    ("CREATE TENSOR T SHAPE (2, 2) TILE (2, 2) DTYPE int32 FILL CONSTANT(1.5)", "FILL", "does not fit in int32"),
])
def test_a_fill_argument_it_refuses_gets_the_caret(con, statement, part, message):
    with pytest.raises(trdb.Error) as failure:
        con.execute(statement)
    text = str(failure.value)
    assert message in text
    assert text.splitlines()[2].index("^") - len("LINE 1: ") == statement.index(part)
