"""External tensors on a local directory: COPY ... PARTITIONS writes the dataset, CREATE TENSOR ... LOCATION
reads it like a stored tensor (whole, streamed, one partition), bad datasets and locations are clear errors."""
from __future__ import annotations

import os
import shutil

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse

import trdb
from trdb.storage import external_reads
from trdb.storage.external_location import locate
from trdb.storage.tensor_meta import TensorMeta

SHAPE, TILE = (50, 70), (16, 16)
MATMUL = ("SELECT X.i AS i, A.i AS j, SUM(MATMUL(X.v, TRANSPOSE(A.v))) AS v FROM X JOIN A ON X.j = A.j "
          "GROUP BY X.i, A.i")


def _array() -> np.ndarray:
    array = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    array[:16, :16] = 0  # an absent tile
    return array


@pytest.fixture
def made(tmp_path):
    """A file database holding A, and its tiles written as one file and as a 4-partition dataset."""
    con = trdb.connect(str(tmp_path / "db.trdb"))
    # sparse on purpose, so that the all-zero tile is absent (a dense load keeps it: zeros are values)
    con.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [scipy.sparse.csr_matrix(_array())])
    con.execute(f"COPY A TO '{tmp_path / 'a.parquet'}' (FORMAT parquet)")
    assert con.execute(f"COPY A TO '{tmp_path / 'ds'}' (FORMAT parquet, PARTITIONS 4)").rowcount == 19
    yield con, tmp_path
    con.close()


def _tensors(con) -> list:
    return con.execute("SHOW TENSORS").fetchall()


@pytest.mark.parametrize("source", ["a.parquet", "ds"])
def test_an_external_tensor_gives_what_the_stored_one_gives(made, source):
    con, folder = made
    con.execute(f"CREATE TENSOR X SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / source}'")
    stored, external = _tensors(con)
    assert external[1:-1] == stored[1:-1]  # keys, shape, tile, dtype, tuple count and density alike
    assert (stored[-1], external[-1]) == (None, str(folder / source))  # where each lives
    expected = _array()
    for workers in (1, 2, 3):
        con.execute(f"SET workers = {workers}")
        np.testing.assert_array_equal(con.execute("SELECT * FROM X").fetch_tensor(), expected)
        np.testing.assert_allclose(con.execute(MATMUL).fetch_tensor(), expected @ expected.T, rtol=1e-4, atol=1e-4)
    assert sorted(os.listdir(folder / "ds")) == [f"part={p}" for p in range(4)]


def test_a_streamed_scan_reads_bounded_batches_and_only_its_own_partitions(made, monkeypatch):
    con, folder = made
    con.execute(f"CREATE TENSOR X SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'ds'}'")
    opened, original = [], external_reads.open_parquet
    monkeypatch.setattr(external_reads, "open_parquet", lambda loc, path: opened.append(path) or original(loc, path))
    con.execute("SET memory_limit = '64KB'")  # the pool keeps 16 KB: X (19 KB) is streamed, 4 KB a read
    con.execute("SET workers = 2")
    expected = _array()
    np.testing.assert_allclose(con.execute(MATMUL).fetch_tensor(), expected @ expected.T, rtol=1e-4, atol=1e-4)
    assert opened, "the scan streams from the dataset"
    location = locate(str(folder / "ds"), [str(folder)])
    meta = TensorMeta("X", ("i", "j"), "v", np.dtype("float32"), SHAPE, TILE, "", location=location.uri)
    seen = []
    for partition in range(2):
        opened.clear()
        reads = list(external_reads.read_partition(location, meta, partition, 2, read_bytes=4096))
        assert all(len(keys) <= 4 for keys, _ in reads)  # 4 KB reads of 1 KB tiles
        assert {os.path.basename(os.path.dirname(p)) for p in opened[1:]} == {f"part={partition}",
                                                                            f"part={partition + 2}"}
        seen += [tuple(k) for keys, _ in reads for k in keys.tolist()]
    thirds = [tuple(k) for p in range(3) for keys, _ in external_reads.read_partition(location, meta, p, 3)
              for k in keys.tolist()]
    assert sorted(seen) == sorted(thirds) and len(set(seen)) == len(seen) == 19


def test_a_rewritten_dataset_is_read_anew(made):
    con, folder = made
    con.execute(f"CREATE TENSOR X SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'ds'}'")
    con.execute("SELECT * FROM X").fetch_tensor()  # kept in the buffer pool
    con.execute(f"COPY (SELECT A.i, A.j, A.v * 2 AS v FROM A) TO '{folder / 'ds'}' (PARTITIONS 2)")
    np.testing.assert_array_equal(con.execute("SELECT * FROM X").fetch_tensor(), 2 * _array())
    con.execute("DROP TENSOR X")  # the catalog entry only: the files are not trdb's
    assert sorted(os.listdir(folder / "ds")) == ["part=0", "part=1"]


@pytest.mark.parametrize("statement", [
    "INSERT INTO X VALUES (0, 0, ?)", "UPDATE X SET v = X.v * 2", "DELETE FROM X WHERE X.i = 1",
    "COPY X FROM '{folder}/a.parquet'"])
def test_writes_to_an_external_tensor_are_refused(made, statement):
    con, folder = made
    con.execute(f"CREATE TENSOR X SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'ds'}'")
    before = _tensors(con)
    params = [np.ones(TILE, np.float32)] if "?" in statement else None
    with pytest.raises(trdb.NotSupportedError, match='"X" is external .*does not write it') as error:
        con.execute(statement.format(folder=folder), params)
    assert "CREATE TENSOR X_copy AS SELECT * FROM X" in str(error.value)
    assert _tensors(con) == before
    np.testing.assert_array_equal(con.execute("SELECT * FROM X").fetch_tensor(), _array())


def _long_form(folder):
    pq.write_table(pa.table({"i": [0], "j": [0], "v": [1.0]}), str(folder / "long.parquet"))
    return folder / "long.parquet"


def _not_parquet(folder):
    (folder / "junk").mkdir()
    (folder / "junk" / "x.parquet").write_text("not parquet")
    return folder / "junk"


def _repeated(folder):
    table = pq.read_table(str(folder / "a.parquet"))
    pq.write_table(pa.concat_tables([table, table.slice(3, 1)]), str(folder / "repeated.parquet"))
    return folder / "repeated.parquet"


def _misplaced(folder):
    shutil.copytree(folder / "ds", folder / "bad")
    os.replace(folder / "bad" / "part=1" / "data.parquet", folder / "bad" / "part=2" / "data.parquet")
    return folder / "bad"


LAYOUT = "SHAPE (50, 70) TILE (16, 16)"
BAD = [  # where, the declaration, the error, its message, whether it has a hint
    (lambda f: f / "missing", LAYOUT, trdb.OperationalError, "no Parquet dataset at", True),
    (lambda f: " ", LAYOUT, trdb.OperationalError, "needs a location", True),
    (lambda f: "/etc", LAYOUT, trdb.OperationalError, "outside the allowed roots", True),
    (lambda f: "gs://bucket/x", LAYOUT, trdb.NotSupportedError, "neither a path", True),
    (_long_form, LAYOUT, trdb.DataError, "not in tile form", True),
    (_not_parquet, LAYOUT, trdb.DataError, "is malformed", True),
    (lambda f: f / "ds", "SHAPE (50, 70) TILE (8, 8)", trdb.DataError, r"float32 tiles of shape \(16, 16\); X is", True),
    (lambda f: f / "ds", LAYOUT + " DTYPE float64", trdb.DataError, "declared float64", True),
    (lambda f: f / "ds", "SHAPE (32, 70) TILE (16, 16)", trdb.DataError, "outside its tile grid", True),
    (lambda f: f / "ds", "(r, c) " + LAYOUT, trdb.DataError, "no integer key column 'r'", True),
    (_misplaced, LAYOUT, trdb.DataError, "belongs in another part", True),
    (_repeated, LAYOUT, trdb.DataError, "more than one tile at key", True),
]


@pytest.mark.parametrize("where,layout,error,message,hint", BAD, ids=[b[3] for b in BAD])
def test_a_bad_location_or_dataset_is_a_clear_error_and_changes_nothing(made, where, layout, error, message, hint):
    con, folder = made
    before = _tensors(con)
    with pytest.raises(error, match=message) as raised:
        con.execute(f"CREATE TENSOR X {layout} LOCATION '{where(folder)}'")
    assert bool(raised.value.hint) == hint
    assert _tensors(con) == before
    assert "Traceback" not in str(raised.value)


def test_roots_default_to_the_database_directory_and_are_a_setting_of_the_connection(made, tmp_path_factory):
    con, folder = made
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    shutil.copytree(folder / "ds", elsewhere / "ds")
    with pytest.raises(trdb.OperationalError, match="outside the allowed roots") as error:
        con.execute(f"CREATE TENSOR Y SHAPE (50, 70) TILE (16, 16) LOCATION '{elsewhere / 'ds'}'")
    assert "SET external_roots" in str(error.value)
    con.execute(f"SET external_roots = '{elsewhere}'")
    con.execute(f"CREATE TENSOR Y SHAPE (50, 70) TILE (16, 16) LOCATION '{elsewhere / 'ds'}'")
    np.testing.assert_array_equal(con.execute("SELECT * FROM Y").fetch_tensor(), _array())
    with trdb.connect() as memory:  # in memory: no directory of its own, so nothing is allowed
        with pytest.raises(trdb.OperationalError, match=r"allowed: none"):
            memory.execute(f"CREATE TENSOR Y SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'ds'}'")


def test_a_tampered_location_is_refused_when_read(made, tmp_path_factory):
    con, folder = made
    con.execute(f"CREATE TENSOR X SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'ds'}'")
    con.close()
    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(folder / "ds", outside / "ds")  # a real dataset, but outside the roots
    for location in (str(outside / "ds"), f"{folder}/../{outside.name}/ds", "s3://bucket/ds"):
        tampered = duckdb.connect(str(folder / "db.trdb"))
        tampered.execute("UPDATE _trdb.tensors SET location = ? WHERE name = 'X'", [location])
        tampered.close()
        with trdb.connect(str(folder / "db.trdb")) as again:
            with pytest.raises(trdb.OperationalError, match="outside the allowed roots"):
                again.execute("SELECT * FROM X")
            assert again.execute("SELECT count(*) FROM A").fetchall() == [(19,)]
    tampered = duckdb.connect(str(folder / "db.trdb"))
    tampered.execute("UPDATE _trdb.tensors SET tile_table = '_trdb.tiles_1' WHERE name = 'X'")
    tampered.close()
    with trdb.connect(str(folder / "db.trdb")) as again:
        with pytest.raises(trdb.DataError, match='"X" is damaged.*both a location and a tile table'):
            again.execute("SELECT * FROM X")


def test_a_link_out_of_the_roots_is_refused_and_location_goes_without_fill(made, tmp_path_factory):
    con, folder = made
    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(folder / "ds", outside / "ds")
    os.symlink(outside / "ds", folder / "link")  # inside the root by name, outside once resolved
    with pytest.raises(trdb.OperationalError, match="outside the allowed roots"):
        con.execute(f"CREATE TENSOR Y SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'link'}'")
    with pytest.raises(trdb.ProgrammingError, match="has no FILL") as error:
        con.execute(f"CREATE TENSOR Y SHAPE (50, 70) TILE (16, 16) FILL ONES LOCATION '{folder / 'ds'}'")
    assert "LINE 1:" in str(error.value)


@pytest.mark.parametrize("seed", range(0, 48, 4), ids=lambda s: f"seed{s:03d}")
def test_random_queries_on_external_tensors_give_the_oracle_results(tmp_path, seed):
    """Every tensor of a random case written out (4 partitions) and registered again as external."""
    from helpers.random_queries import build_case
    from test_random_queries import check_rows

    case = build_case(seed)
    with trdb.connect(str(tmp_path / "db.trdb")) as con:
        for sql, array, _ in case.setup:
            con.execute(sql, None if array is None else [array])
        for name, keys, shape, tile, dtype, *_ in con.execute("SHOW TENSORS").fetchall():
            con.execute(f"COPY {name} TO '{tmp_path / name}' (PARTITIONS 4)")
            con.execute(f"CREATE OR REPLACE TENSOR {name} ({keys}) SHAPE ({shape[1:-1]}) TILE ({tile[1:-1]}) "
                        f"DTYPE {dtype} LOCATION '{tmp_path / name}'")
        assert con.execute("SELECT count(*) FROM _trdb.tensors WHERE location IS NULL").fetchall() == [(0,)]
        con.execute("SET workers = 2")
        problems = check_rows(case, con.execute(case.sql).fetchall())
    assert not problems, f"{case.describe()}\n" + "\n".join(problems[:8])


def test_duckdb_refusing_file_access_refuses_local_external_tensors(made):
    con, folder = made
    con.execute(f"CREATE TENSOR X SHAPE (50, 70) TILE (16, 16) LOCATION '{folder / 'ds'}'")
    con.execute("SET enable_external_access = false")
    with pytest.raises(trdb.OperationalError, match="file system operations are disabled"):
        con.execute("SELECT * FROM X")


def test_a_failed_or_refused_partitioned_copy_leaves_no_directory(made):
    con, folder = made
    with pytest.raises(trdb.DataError, match="two tuples under key"):
        con.execute(f"COPY (SELECT A.i // 2 AS i, A.j, A.v FROM A) TO '{folder / 'dup'}' (PARTITIONS 2)")
    for options, message in (("PARTITIONS 2, FORMAT csv", "PARTITIONS writes a Parquet dataset of tiles"),
                             ("PARTITIONS 0", "takes a count from 1 to 1024"), ("PARTITIONS x", "not 'x'")):
        with pytest.raises(trdb.ProgrammingError, match=message):
            con.execute(f"COPY A TO '{folder / 'dup'}' ({options})")
    with pytest.raises(trdb.OperationalError, match="not a partitioned dataset COPY wrote"):
        con.execute(f"COPY A TO '{folder}' (PARTITIONS 2)")  # the database's own directory
    assert not [n for n in os.listdir(folder) if "dup" in n]


def test_fewer_keys_than_axes_other_dtypes_and_a_0_d_tensor(tmp_path):
    b = np.random.default_rng(4).standard_normal((40, 8))
    with trdb.connect(str(tmp_path / "db.trdb")) as con:
        con.execute("CREATE TENSOR B (r) FROM ? TILE (16, 8)", [b])
        con.execute("CREATE TENSOR S SHAPE () TILE () DTYPE int64 FILL CONSTANT(7)")
        for name in ("B", "S"):
            con.execute(f"COPY {name} TO '{tmp_path / name}' (PARTITIONS 2)")
        con.execute(f"CREATE TENSOR XB (r) SHAPE (40, 8) TILE (16, 8) DTYPE float64 LOCATION '{tmp_path / 'B'}'")
        con.execute(f"CREATE TENSOR XS SHAPE () TILE () DTYPE int64 LOCATION '{tmp_path / 'S'}'")
        np.testing.assert_array_equal(con.execute("SELECT * FROM XB").fetch_tensor(), b)
        assert con.execute("SELECT XS.v * 2 AS v FROM XS").fetchall() == [(14,)]
