"""Names, imports and catalog text are checked where they enter by the rule the loader reads them with."""
from __future__ import annotations

import json
import shutil

import duckdb
import numpy as np
import pytest

import trdb

CREATES = [
    ('CREATE TENSOR A(i, "my j") SHAPE (4, 4) TILE (2, 2) FILL ONES', "A"),
    ('CREATE TENSOR B("é") SHAPE (4) TILE (2) FILL ONES', "B"),
    ('CREATE TENSOR "C x" SHAPE (4) TILE (2) FILL ONES', '"C x"'),
    ('CREATE TENSOR "Dé" SHAPE (4) TILE (2) FILL ONES', '"Dé"'),
    ('CREATE TENSOR E AS SELECT X.i, X.v AS "my val" FROM Base X', "E"),
    ('CREATE TENSOR F AS SELECT X.i, X.v AS "é" FROM Base X', "F"),
    ('CREATE TENSOR G AS SELECT X.i AS "k k", X.v FROM Base X', "G"),
    ('CREATE TENSOR H("a\x00b") SHAPE (4) TILE (2) FILL ONES', "H"),
    ('CREATE TENSOR "I\x00" SHAPE (4) TILE (2) FILL ONES', '"I\x00"'),
    ('CREATE VIEW "V\x00" AS SELECT * FROM Base', '"V\x00"'),
    ('ALTER TENSOR Base RENAME TO "J\x00"', '"J\x00"'),
]


@pytest.mark.parametrize("statement, name", CREATES)
def test_a_name_create_accepts_reads_back_after_reopening_or_create_refuses_it(tmp_path, statement, name):
    path = str(tmp_path / "names.trdb")
    con = trdb.connect(path)
    con.execute("CREATE TENSOR Base SHAPE (4) TILE (2) FILL ONES")
    try:
        con.execute(statement)
    except trdb.ProgrammingError as exc:  # refused where it enters: nothing committed
        assert "name" in str(exc)
        refused = True
    else:
        refused = False
        want = con.execute(f"SELECT * FROM {name}").fetchall()
    con.close()
    con = trdb.connect(path)
    if refused:
        assert con.execute("SELECT * FROM Base").fetchall()
        with pytest.raises(trdb.ProgrammingError, match="does not exist"):
            con.execute(f"SELECT * FROM {name}")
        return
    got = con.execute(f"SELECT * FROM {name}").fetchall()
    assert sorted((k, v.tolist()) for *k, v in got) == sorted((k, v.tolist()) for *k, v in want)  # no ORDER BY
    assert con.execute("SHOW TABLES").fetchall()


def test_quoted_key_and_value_names_survive_reopening_export_and_import(tmp_path):
    con = trdb.connect(str(tmp_path / "a.trdb"))
    con.execute('CREATE TENSOR A(i, "my j") SHAPE (4, 4) TILE (2, 2) FILL ONES')
    con.execute('CREATE TENSOR E AS SELECT X.i, X."my j", X.v AS "é v" FROM A X')
    con.execute(f"EXPORT DATABASE '{tmp_path / 'backup'}'")
    con.close()
    con = trdb.connect(str(tmp_path / "a.trdb"))
    assert [r[0] for r in con.execute("DESCRIBE E").fetchall()] == ["i", "my j", "é v"]
    restored = trdb.connect(str(tmp_path / "b.trdb"))
    restored.execute(f"IMPORT DATABASE '{tmp_path / 'backup'}'")
    assert restored.sql("SELECT * FROM E").tensor().tolist() == np.ones((4, 4)).tolist()


# ------------------------------------------------------------------ plain SQL DDL and the shared namespace

SHADOWING = [
    "CREATE TABLE A (x INT)",
    "CREATE TEMP TABLE a (x INT)",
    'CREATE TABLE main."A" AS SELECT 1 AS x',
    "CREATE TABLE IF NOT EXISTS A (x INT)",
    "CREATE /* a comment */ TABLE W (x INT)",
    "CREATE OR REPLACE VIEW w AS SELECT 1 AS x",
    "CREATE SCHEMA s; CREATE TABLE s.A (x INT)",
    "CREATE TABLE t (x INT); ALTER TABLE t RENAME TO A",
    "CREATE VIEW dv AS SELECT 1 AS x; ALTER VIEW dv RENAME TO A",
]


@pytest.mark.parametrize("statement", SHADOWING)
def test_plain_sql_ddl_cannot_give_a_table_the_name_of_a_tensor_or_view(tmp_path, statement):
    con = trdb.connect(str(tmp_path / "ns.trdb"))
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("CREATE VIEW W AS SELECT * FROM A")
    before = con.execute("SHOW TABLES").fetchall()
    with pytest.raises(trdb.IntegrityError) as caught:
        con.execute(statement)
    assert '"a"' in str(caught.value).lower() or '"w"' in str(caught.value).lower()  # the name taken
    shown = con.execute("SHOW TABLES").fetchall()
    assert [row for row in shown if row[0].lower() in ("a", "w")] == [r for r in before if r[0].lower() in ("a", "w")]
    assert con.execute("SELECT * FROM A").fetchall()


def test_plain_sql_ddl_of_other_names_still_runs(con):
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("CREATE TABLE t (x INT)")
    con.execute("ALTER TABLE t RENAME TO u")
    con.execute("CREATE VIEW dv AS SELECT * FROM u")
    assert sorted(con.execute("SHOW TABLES").fetchall()) == [("A", "tensor"), ("dv", "view"), ("u", "table")]


def test_a_refused_plain_ddl_inside_a_transaction_aborts_it(con):
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("BEGIN")
    with pytest.raises(trdb.IntegrityError, match="tensor"):
        con.execute("CREATE TABLE A (x INT)")
    con.execute("ROLLBACK")
    assert con.execute("SHOW TABLES").fetchall() == [("A", "tensor")]


# ------------------------------------------------------------------ IMPORT DATABASE


@pytest.fixture
def export(tmp_path):
    """An export of one tensor A and one view W, and a function writing a changed copy of its catalog."""
    con = trdb.connect(str(tmp_path / "source.trdb"))
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("CREATE VIEW W AS SELECT * FROM A")
    con.execute(f"EXPORT DATABASE '{tmp_path / 'backup'}'")
    con.close()
    catalog = json.loads((tmp_path / "backup" / "catalog.json").read_text())

    def changed(change) -> str:
        folder = tmp_path / f"changed_{len(list(tmp_path.iterdir()))}"
        shutil.copytree(tmp_path / "backup", folder)
        edited = json.loads(json.dumps(catalog))
        change(edited)
        (folder / "catalog.json").write_text(json.dumps(edited))
        return str(folder)
    return changed


def _tensor(field, value):
    return lambda catalog: catalog["tensors"][0].__setitem__(field, value)


def _view(field, value):
    return lambda catalog: catalog["views"][0].__setitem__(field, value)


BAD_ENTRIES = {
    "complex64": _tensor("dtype", "complex64"),
    "U8": _tensor("dtype", "U8"),
    "float128": _tensor("dtype", "float128"),
    ">f8": _tensor("dtype", ">f8"),
    "empty name": _tensor("name", ""),
    "null name": _tensor("name", None),
    "NUL name": _tensor("name", "A\x00"),
    "float shape": _tensor("shape", [4.0]),
    "string tile": _tensor("tile", ["2"]),
    "null keys": _tensor("keys", None),
    "view not a query": _view("query", "DROP TENSOR A"),
    "view not parsing": _view("query", "SELECT * FROM"),
    "surrogate name": _tensor("name", "A\ud800"),
    "surrogate key": _tensor("keys", ["\udc00"]),
    "surrogate in a view": _view("query", "SELECT * FROM A WHERE A.i > '\ud800'"),
    "view null name": _view("name", None),
    "view empty name": _view("name", ""),
    "entry not an object": lambda catalog: catalog["tensors"].__setitem__(0, 7),
    "duplicate names": lambda catalog: catalog["views"][0].__setitem__("name", "a"),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
def test_import_refuses_an_entry_the_loader_would_reject_and_commits_nothing(tmp_path, export, case):
    folder = export(BAD_ENTRIES[case])
    path = str(tmp_path / f"target_{case.replace(' ', '_').replace('>', 'gt')}.trdb")
    con = trdb.connect(path)
    with pytest.raises(trdb.DataError) as caught:
        con.execute(f"IMPORT DATABASE '{folder}'")
    assert "IMPORT DATABASE" in str(caught.value)
    assert "tensor" in str(caught.value) or "view" in str(caught.value)
    assert con.execute("SHOW TABLES").fetchall() == []
    con.close()
    assert trdb.connect(path).execute("SHOW TABLES").fetchall() == []


def test_import_of_a_sound_export_still_works(tmp_path, export):
    con = trdb.connect(str(tmp_path / "target.trdb"))
    con.execute(f"IMPORT DATABASE '{export(lambda catalog: None)}'")
    assert con.execute("SHOW TABLES").fetchall() == [("A", "tensor"), ("W", "view")]


# ------------------------------------------------------------------ crafted catalog text


def _tamper(path: str, sql: str, params=()) -> None:
    raw = duckdb.connect(path)
    raw.execute(sql, list(params))
    raw.close()


def test_deeply_nested_json_in_a_catalog_shape_damages_that_tensor_only(tmp_path):
    path = str(tmp_path / "deep.trdb")
    con = trdb.connect(path)
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("CREATE TENSOR B SHAPE (4) TILE (2) FILL ONES")
    con.close()
    _tamper(path, "UPDATE _trdb.tensors SET shape = ? WHERE name = 'A'", ["[" * 100_000 + "]" * 100_000])
    con = trdb.connect(path)
    with pytest.raises(trdb.DataError, match="damaged"):
        con.execute("SELECT * FROM A")
    assert len(con.execute("SELECT * FROM B").fetchall()) == 2
    con.execute("DROP TENSOR A")


@pytest.mark.parametrize("field", ["keys", "tile", "distinct_keys"])
def test_nested_json_in_other_catalog_fields_is_damage_not_a_crash(tmp_path, field):
    path = str(tmp_path / "nested.trdb")
    trdb.connect(path).execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    _tamper(path, f"UPDATE _trdb.tensors SET {field} = ?", ['[[1], {"a": [' * 5000 + "]}" * 5000 + "]"])
    with pytest.raises(trdb.DataError, match="damaged"):
        trdb.connect(path).execute("SELECT * FROM A")


@pytest.mark.parametrize("key", [2**63 - 1, -(2**63), 2**62])
def test_a_huge_tile_key_is_a_clear_error_not_an_internal_one(tmp_path, key):
    path = str(tmp_path / "key.trdb")
    con = trdb.connect(path)
    con.execute("CREATE TENSOR B SHAPE (4) TILE (2) FILL ONES")
    table = con.execute("SELECT tile_table FROM _trdb.tensors WHERE name = 'B'").fetchall()[0][0]
    con.close()
    _tamper(path, f"UPDATE {table} SET k0 = ? WHERE k0 = 1", [key])
    con = trdb.connect(path)
    for statement in ("SELECT * FROM B", "SELECT SUM(B.v) FROM B", "SUMMARIZE B"):
        with pytest.raises(trdb.DataError):
            con.execute(statement).fetchall()


def test_a_stored_view_that_is_not_a_query_is_reported_not_an_internal_error(tmp_path):
    path = str(tmp_path / "view.trdb")
    con = trdb.connect(path)
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("CREATE VIEW W AS SELECT * FROM A")
    con.close()
    _tamper(path, "UPDATE _trdb.views SET query = 'DROP TENSOR A'")
    con = trdb.connect(path)
    assert ("W", "view") in con.execute("SHOW TABLES").fetchall()
    with pytest.raises(trdb.DataError, match="W"):
        con.execute("SELECT * FROM W")
    with pytest.raises(trdb.DataError, match="W"):
        con.execute("DESCRIBE W")
    con.execute("DROP VIEW W")
    assert con.execute("SHOW TABLES").fetchall() == [("A", "tensor")]


# ------------------------------------------------------------------ chains of views

CHAIN = 200


def _chain(con, length: int) -> str:
    con.execute("CREATE TENSOR A SHAPE (4) TILE (2) FILL ONES")
    con.execute("CREATE VIEW V0 AS SELECT * FROM A")
    for k in range(1, length):
        con.execute(f"CREATE VIEW V{k} AS SELECT * FROM V{k - 1}")
    return f"V{length - 1}"


def test_a_long_chain_of_views_can_be_listed_described_and_summarized_also_after_reopening(tmp_path):
    path = str(tmp_path / "chain.trdb")
    con = trdb.connect(path)
    last = _chain(con, CHAIN)
    for connection in (con, trdb.connect(path)):
        assert len(connection.execute(f"SELECT * FROM {last}").fetchall()) == 2
        assert len(connection.execute("SHOW TABLES").fetchall()) == CHAIN + 1
        assert len(connection.execute("SHOW ALL TABLES").fetchall()) == CHAIN + 1
        assert [r[0] for r in connection.execute(f"DESCRIBE {last}").fetchall()] == ["i", "v"]
        assert len(connection.execute(f"SUMMARIZE {last}").fetchall()) == 2
        assert connection.execute(f"SHOW {last}").fetchall()
