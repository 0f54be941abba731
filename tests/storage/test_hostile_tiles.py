"""Tile rows tampered with outside trdb (bytes, fmt, nnz, keys) give a DataError naming the tensor, never a crash."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import duckdb
import numpy as np
import pytest
import scipy.sparse

import trdb

CSR32 = 1
READER = textwrap.dedent("""
    import json, sys, trdb
    for path, queries in json.loads(sys.argv[1]):
        con = trdb.connect(path)
        for query in queries:
            try:
                con.execute(query).fetchall()
            except trdb.DataError as exc:
                print("DataError:", exc.message)
            except trdb.Error as exc:
                print(type(exc).__name__ + ":", exc.message)
            else:
                print("ok")
        con.close()
""")


def sparse_matrix() -> scipy.sparse.csr_array:
    m = np.zeros((16, 16), dtype=np.float32)
    m[0, 1], m[0, 3], m[1, 0], m[2, 2], m[9, 12], m[14, 3] = 1, 2, 3, 4, 5, 6
    return scipy.sparse.csr_array(m)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "pristine.db"
    con = trdb.connect(str(path))
    con.execute("CREATE TENSOR D FROM ? TILE (2, 3)", [np.arange(1, 25, dtype=np.float32).reshape(4, 6)])
    con.execute("CREATE TENSOR S FROM ? TILE (8, 8)", [sparse_matrix()])
    con.close()
    return path


def tampered(pristine, folder, tensor: str, change) -> str:
    """A copy of the pristine database whose tile table of `tensor` was changed by change(duckdb, table)."""
    path = folder / "tampered.db"
    shutil.copy(pristine, path)
    con = duckdb.connect(str(path))
    table = con.execute("SELECT tile_table FROM _trdb.tensors WHERE name = ?", [tensor]).fetchone()[0]
    change(con, table)
    con.close()
    return str(path)


def read_in_subprocess(*jobs: tuple[str, tuple[str, ...]]) -> list[list[str]]:
    """Run each job's queries on its database in one fresh process, so that a segfault fails the tests
    instead of killing pytest; each job's output lines (one per query)."""
    done = subprocess.run([sys.executable, "-c", READER, json.dumps(jobs)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"reader died with {done.returncode}: {done.stderr[-2000:]}"
    lines = done.stdout.strip().splitlines()
    counts = [len(queries) for _, queries in jobs]
    starts = np.cumsum([0] + counts)
    return [lines[start:start + count] for start, count in zip(starts, counts)]


DENSE_QUERIES = ("SELECT * FROM D", "SELECT SUM(SUMSQ(D.v)) FROM D", "SELECT * FROM S")
SPARSE_QUERIES = ("SELECT * FROM S", "SELECT SUM(MATMUL(S.v, S.v)) FROM S", "SELECT * FROM D")


@pytest.fixture(scope="module")
def readings(pristine, tmp_path_factory) -> dict:
    """Every tampered copy read in one process (a process per case took two minutes of the suite)."""
    jobs, names = [], []
    for tensor, cases, queries in (("D", DENSE_CASES, DENSE_QUERIES), ("S", SPARSE_CASES, SPARSE_QUERIES)):
        for case, change in sorted(cases.items()):
            jobs.append((tampered(pristine, tmp_path_factory.mktemp("case"), tensor, change), queries))
            names.append((tensor, case))
    return dict(zip(names, read_in_subprocess(*jobs)))


def blob(con, table: str, key: tuple[int, int]) -> bytearray:
    return bytearray(con.execute(f"SELECT v FROM {table} WHERE k0 = ? AND k1 = ?", list(key)).fetchone()[0])


def set_column(column: str, value, key=(0, 0)):
    def change(con, table):
        con.execute(f"UPDATE {table} SET {column} = ? WHERE k0 = ? AND k1 = ?", [value, *key])
    return change


def edit_blob(edit, key=(0, 0)):
    """A change that rewrites one tile's bytes with edit(bytearray) -> bytes."""
    def change(con, table):
        data = edit(blob(con, table, key))
        con.execute(f"UPDATE {table} SET v = ? WHERE k0 = ? AND k1 = ?", [bytes(data), *key])
    return change


def csr_words(edit):
    """Edit a CSR32 tile of S (8 x 8, float32) as int32 words: values (nnz, padded), indices, indptr."""
    def apply(data: bytearray) -> bytes:
        words = np.frombuffer(bytes(data), dtype="<i4").copy()
        edit(words)
        return words.tobytes()
    return apply


# S's tile (0, 0) holds rows 0..7, columns 0..7: (0,1), (0,3), (1,0), (2,2): nnz 4, so the sections are
# 4 value words, 4 index words [1, 3, 0, 2] and 9 pointer words [0, 2, 3, 4, 4, ...] padded to 10.
INDEX, POINTER = 4, 8

DENSE_CASES = {
    "short blob": edit_blob(lambda b: b[:-4]),
    "empty blob": edit_blob(lambda b: b""),
    "long blob": edit_blob(lambda b: b + b"\0" * 8),
    "odd blob": edit_blob(lambda b: b[:-1]),
    "unknown fmt": set_column("fmt", 7),
    "NULL fmt": set_column("fmt", None),
    "CSR fmt on dense bytes": set_column("fmt", CSR32),
    "negative nnz": set_column("nnz", -1),
    "nnz beyond the tile": set_column("nnz", 10 ** 12),
    "key outside the shape": set_column("k0", 7),
}

SPARSE_CASES = {
    "nnz one more": set_column("nnz", 5),
    "nnz one less": set_column("nnz", 3),
    "nnz huge": set_column("nnz", 2 ** 40),
    "dense fmt on CSR bytes": set_column("fmt", 0),
    "CSR64 fmt on CSR32 bytes": set_column("fmt", 2),
    "column index far out": edit_blob(csr_words(lambda w: w.__setitem__(INDEX + 1, 10 ** 9))),
    "column index negative": edit_blob(csr_words(lambda w: w.__setitem__(INDEX, -5))),
    "column index just out": edit_blob(csr_words(lambda w: w.__setitem__(INDEX + 3, 8))),
    "unsorted columns": edit_blob(csr_words(lambda w: w.__setitem__(slice(INDEX, INDEX + 2), [3, 1]))),
    "duplicate columns": edit_blob(csr_words(lambda w: w.__setitem__(INDEX + 1, 1))),
    "pointers end past nnz": edit_blob(csr_words(lambda w: w.__setitem__(POINTER + 8, 9))),
    "pointers end before nnz": edit_blob(csr_words(lambda w: w.__setitem__(POINTER + 8, 2))),
    "pointers start past 0": edit_blob(csr_words(lambda w: w.__setitem__(POINTER, 1))),
    "pointers decrease": edit_blob(csr_words(lambda w: w.__setitem__(POINTER + 2, 1))),
    "pointers far out": edit_blob(csr_words(lambda w: w.__setitem__(POINTER + 1, 2 ** 30))),
}


@pytest.mark.parametrize("case", sorted(DENSE_CASES))
def test_tampered_dense_tile_is_a_data_error(readings, case):
    lines = readings[("D", case)]
    assert lines[0].startswith('DataError: tensor "D" has a corrupt tile at key'), lines
    assert lines[1].startswith('DataError: tensor "D"'), lines
    assert lines[2] == "ok", lines  # the other tensor is still readable


@pytest.mark.parametrize("case", sorted(SPARSE_CASES))
def test_tampered_csr_tile_is_a_data_error(readings, case):
    lines = readings[("S", case)]
    assert lines[0].startswith('DataError: tensor "S" has a corrupt tile at key (0, 0)'), lines
    assert lines[1].startswith('DataError: tensor "S"'), lines
    assert lines[2] == "ok", lines


def test_untampered_tiles_read_back(pristine):
    assert read_in_subprocess((str(pristine), ("SELECT * FROM D", "SELECT * FROM S"))) == [["ok", "ok"]]
    con = trdb.connect(str(pristine))
    np.testing.assert_array_equal(con.execute("SELECT * FROM S").fetch_tensor(), sparse_matrix().toarray())
    con.close()


def test_the_csr_layout_these_cases_assume(pristine, tmp_path):
    con = duckdb.connect(str(pristine), read_only=True)
    table = con.execute("SELECT tile_table FROM _trdb.tensors WHERE name = 'S'").fetchone()[0]
    fmt, nnz = con.execute(f"SELECT fmt, nnz FROM {table} WHERE k0 = 0 AND k1 = 0").fetchone()
    words = np.frombuffer(blob(con, table, (0, 0)), dtype="<i4")
    con.close()
    assert (fmt, nnz) == (CSR32, 4)
    assert words[INDEX:INDEX + 4].tolist() == [1, 3, 0, 2] and words[POINTER:POINTER + 9].tolist() == [0, 2, 3] + [4] * 6
