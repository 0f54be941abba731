"""The file sandbox: every file trdb opens itself (COPY, EXPORT/IMPORT, .npy, external datasets) is refused
where DuckDB's own readers would refuse it (enable_external_access, allowed_directories, allowed_paths,
disabled_filesystems), judged on the path the file resolves to, symbolic links followed."""
from __future__ import annotations

import os

import duckdb
import numpy as np
import pytest

import trdb

REFUSED = "disabled by configuration"


@pytest.fixture
def places(tmp_path):
    """An allowed directory `ok` (the database's) and a directory `out` outside it, holding an .npy file,
    a tile-form Parquet file and a one-file dataset."""
    ok, out = tmp_path / "ok", tmp_path / "out"
    ok.mkdir()
    out.mkdir()
    np.save(out / "a.npy", np.ones((4, 4)))
    with trdb.connect() as con:
        con.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
        con.execute(f"COPY A TO '{out / 'a.parquet'}'")
        con.execute(f"COPY A TO '{out / 'ds'}' (PARTITIONS 2)")
        con.execute(f"EXPORT DATABASE '{out / 'backup'}'")
    return ok, out


def _sandboxed(ok):
    """A file database in `ok`, with a tensor A, that may reach only `ok`."""
    con = trdb.connect(str(ok / "db.trdb"), workers=1)
    con.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    con.execute("CREATE TENSOR E SHAPE (4, 4) TILE (2, 2)")
    con.execute(f"SET allowed_directories = ['{ok}']")
    con.execute("SET enable_external_access = false")
    return con


def test_create_tensor_from_an_npy_file_outside_the_allowed_directories_is_refused(places):
    ok, out = places
    with _sandboxed(ok) as con:
        for statement in (f"CREATE TENSOR N FROM '{out / 'a.npy'}'", f"COPY E FROM '{out / 'a.npy'}'"):
            with pytest.raises(trdb.OperationalError, match=REFUSED):
                con.execute(statement)
        assert [row[0] for row in con.execute("SHOW TENSORS").fetchall()] == ["A", "E"]
        os.symlink(out / "a.npy", ok / "inner.npy")
        with pytest.raises(trdb.OperationalError, match=REFUSED):
            con.execute(f"CREATE TENSOR N FROM '{ok / 'inner.npy'}'")
        np.save(ok / "b.npy", np.ones((4, 4)))
        con.execute(f"CREATE TENSOR N FROM '{ok / 'b.npy'}'")  # inside: read


def test_duckdb_itself_refuses_a_link_inside_an_allowed_directory_that_leads_out(places):
    ok, out = places
    os.symlink(out / "a.parquet", ok / "a.parquet")
    duck = duckdb.connect()
    duck.execute("SET allowed_directories = [?]", [str(ok)]).execute("SET enable_external_access = false")
    with pytest.raises(duckdb.Error, match=REFUSED):
        duck.execute(f"SELECT * FROM read_parquet('{ok / 'a.parquet'}')")


@pytest.mark.parametrize("statement", [
    "COPY A TO '{ok}/door/x.parquet'", "COPY A TO '{ok}/door/x.npy'", "COPY A TO '{ok}/door/x.csv'",
    "COPY E FROM '{ok}/a.parquet'", "COPY E FROM '{ok}/door/a.parquet'", "COPY A TO '{ok}/door/y' (PARTITIONS 2)",
    "EXPORT DATABASE '{ok}/door/backup2'", "IMPORT DATABASE '{ok}/door/backup'"])
def test_a_symlink_inside_an_allowed_directory_does_not_reach_outside_it(places, statement):
    """trdb refuses what DuckDB's own reader refuses (the test above)."""
    ok, out = places
    os.symlink(out, ok / "door")
    os.symlink(out / "a.parquet", ok / "a.parquet")
    with _sandboxed(ok) as con:
        with pytest.raises(trdb.OperationalError, match=REFUSED):
            con.execute(statement.format(ok=ok))
        assert con.execute("SELECT COUNT(*) FROM E").fetchall() == [(0,)]
        assert [row[0] for row in con.execute("SHOW TENSORS").fetchall()] == ["A", "E"]
    assert sorted(os.listdir(out)) == ["a.npy", "a.parquet", "backup", "ds"]


def test_a_symlinked_file_in_an_export_is_not_written_through(places):
    ok, out = places
    (ok / "backup").mkdir()
    os.symlink(out / "stolen.json", ok / "backup" / "catalog.json")
    with _sandboxed(ok) as con:
        with pytest.raises(trdb.OperationalError, match=REFUSED):
            con.execute(f"EXPORT DATABASE '{ok / 'backup'}'")
    assert not (out / "stolen.json").exists()


@pytest.mark.parametrize("statement", [
    "COPY A TO '{ok}/a.parquet'", "COPY A TO '{ok}/a.npy'", "COPY A TO '{ok}/y' (PARTITIONS 2)",
    "COPY E FROM '{out}/a.parquet'", "COPY E FROM '{out}/a.npy'", "CREATE TENSOR N FROM '{out}/a.npy'",
    "SELECT * FROM X", "CREATE TENSOR Y SHAPE (4, 4) TILE (2, 2) LOCATION '{ok}/ds'",
    "EXPORT DATABASE '{ok}/backup'", "IMPORT DATABASE '{out}/backup'"])
def test_disabled_local_filesystem_stops_trdb_as_it_stops_duckdb(places, statement):
    ok, out = places
    con = trdb.connect(str(ok / "db.trdb"), workers=1)
    con.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    con.execute("CREATE TENSOR E SHAPE (4, 4) TILE (2, 2)")
    con.execute(f"COPY A TO '{ok / 'ds'}' (PARTITIONS 2)")
    con.execute(f"CREATE TENSOR X SHAPE (4, 4) TILE (2, 2) LOCATION '{ok / 'ds'}'")
    con.execute("SET disabled_filesystems = 'LocalFileSystem'")
    with pytest.raises(trdb.OperationalError, match="LocalFileSystem"):
        con.execute(statement.format(ok=ok, out=out))
    assert [n for n in os.listdir(ok) if not n.startswith("db.trdb")] == ["ds"]
    assert sorted(os.listdir(out)) == ["a.npy", "a.parquet", "backup", "ds"]
    con.close()


def test_an_external_dataset_whose_part_files_link_outside_its_root_is_refused(places):
    ok, out = places
    (ok / "ds" / "part=0").mkdir(parents=True)
    (ok / "ds" / "part=1").mkdir()
    for part in (0, 1):
        os.symlink(out / "ds" / f"part={part}" / "data.parquet", ok / "ds" / f"part={part}" / "data.parquet")
    con = trdb.connect(str(ok / "db.trdb"), workers=1)  # the roots: the database's directory
    with pytest.raises(trdb.OperationalError, match="outside the allowed roots"):
        con.execute(f"CREATE TENSOR X SHAPE (4, 4) TILE (2, 2) LOCATION '{ok / 'ds'}'")
    assert con.execute("SHOW TENSORS").fetchall() == []
    con.close()


def test_a_part_file_swapped_for_a_link_after_registering_is_refused_at_read(places):
    ok, out = places
    con = trdb.connect(str(ok / "db.trdb"), workers=1)
    con.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    con.execute(f"COPY A TO '{ok / 'ds'}' (PARTITIONS 2)")
    con.execute(f"CREATE TENSOR X SHAPE (4, 4) TILE (2, 2) LOCATION '{ok / 'ds'}'")
    target = ok / "ds" / "part=1" / "data.parquet"
    target.unlink()
    os.symlink(out / "ds" / "part=1" / "data.parquet", target)
    with pytest.raises(trdb.OperationalError, match="outside the allowed roots"):
        con.execute("SELECT * FROM X")
    con.close()


def test_links_that_stay_inside_are_followed(places):
    ok, _ = places
    con = _sandboxed(ok)
    con.execute(f"COPY A TO '{ok / 'a.parquet'}'")
    os.symlink(ok / "a.parquet", ok / "same.parquet")
    assert con.execute(f"COPY E FROM '{ok / 'same.parquet'}'").rowcount == 4
    con.close()
