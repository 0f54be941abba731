"""Ordinary bad input is a trdb error that says what is wrong, never a crash or an InternalError: scipy.sparse
matrices whose arrays do not agree, list parameters where a value goes, arguments out of range, files that
are not what their name says, a disk that fills up."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import trdb

# ------------------------------------------------------------ scipy.sparse inputs

_DEFECTS = {  # a matrix of shape (3, 3) whose arrays were set by hand: scipy trusts them
    "indptr past the entries": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 1, 2], np.int32); "
                               "m.indptr = np.array([0, 1 << 20, 0, 3], np.int32)",
    "indptr not monotone": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 1, 2], np.int32); "
                           "m.indptr = np.array([0, 2, 1, 3], np.int32)",
    "indptr too short": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 1, 2], np.int32); "
                        "m.indptr = np.array([0, 3], np.int32)",
    "indices out of range": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 7, 2], np.int32); "
                            "m.indptr = np.array([0, 1, 2, 3], np.int32)",
    "negative index": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, -5, 2], np.int32); "
                      "m.indptr = np.array([0, 1, 2, 3], np.int32)",
    "csc indptr past the entries": "m = sp.csc_matrix((3, 3)); m.data = np.ones(2); "
                                   "m.indices = np.array([0, 1], np.int32); m.indptr = np.array([0, 9000, 1, 2], np.int32)",
    "coo row out of range": "m = sp.coo_matrix((3, 3)); m.data = np.ones(2); "
                            "m.coords = (np.array([0, 1 << 30]), np.array([0, 1]))",
    "coo coordinates shorter than data": "m = sp.coo_matrix((3, 3)); m.data = np.ones(5); "
                                         "m.coords = (np.array([0, 1]), np.array([0, 1]))",
    "negative shape": "m = csr((3, 3)); m._shape = (-3, 3)",
}
_STATEMENTS = {
    "CREATE FROM ?": "con.execute('CREATE TENSOR S FROM ?', [m])",
    "FROM COO ?": "con.execute('CREATE TENSOR S FROM COO ? (r, c, v) SHAPE (3, 3) TILE (2, 2)', [m])",
    "INSERT": "con.execute('CREATE TENSOR T SHAPE (3, 3) TILE (3, 3)'); con.execute('INSERT INTO T VALUES (0, 0, ?)', [m])",
    "a value": "con.execute('CREATE TENSOR T SHAPE (3, 3) TILE (3, 3) FILL ONES'); "
               "con.execute('SELECT T.v + ? AS v FROM T', [m]).fetchall()",
}


@pytest.mark.parametrize("defect", sorted(_DEFECTS))
def test_a_scipy_matrix_whose_arrays_disagree_is_a_data_error_not_a_crash(defect):
    """Each statement given the matrix, in a child: before the check, scipy's tocoo wrote past its arrays and
    killed the process (an index out of range was an InternalError)."""
    tries = "".join(f"""
        con = trdb.connect(workers=1)
        try:
            {_DEFECTS[defect]}
            {code}
            print({name!r}, "ACCEPTED")
        except trdb.Error as exc:
            print({name!r}, type(exc).__name__, str(exc).splitlines()[0])
        con.close()""" for name, code in _STATEMENTS.items())
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, trdb
        csr = sp.csr_matrix""" + tries + """
        print("DONE")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stdout}{done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert lines[-1] == "DONE" and len(lines) == len(_STATEMENTS) + 1, done.stdout
    for name, line in zip(_STATEMENTS, lines):
        assert line.startswith(f"{name} DataError") and "scipy.sparse" in line, line


def test_a_good_scipy_matrix_is_still_taken():
    import numpy as np
    import scipy.sparse as sp

    m = sp.random(30, 20, density=0.1, format="csr", random_state=1)
    with trdb.connect(workers=1) as con:
        for fmt in ("csr", "csc", "coo", "bsr", "lil", "dok", "dia"):
            con.execute(f"CREATE TENSOR S_{fmt} FROM ? TILE (8, 8)", [m.asformat(fmt)])
            np.testing.assert_allclose(con.execute(f"SELECT * FROM S_{fmt}").fetch_tensor(), m.toarray())
        con.execute("CREATE TENSOR C FROM COO ? (r, c, v) SHAPE (30, 20) TILE (8, 8)", [m])
        np.testing.assert_allclose(con.execute("SELECT * FROM C").fetch_tensor(), m.toarray())


# ------------------------------------------------------------ ordinary bad input: a trdb error, not InternalError

@pytest.fixture
def ones():
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR X SHAPE (4, 4) TILE (2, 2) FILL ONES")
    con.execute("CREATE TENSOR E SHAPE (4, 4) TILE (2, 2)")
    yield con
    con.close()


@pytest.mark.parametrize("value", [[0, 1], (0, 1), {"a": 1}], ids=["list", "tuple", "dict"])
def test_an_in_list_item_bound_to_a_list_is_a_programming_error(ones, value):
    for sql in ("SELECT * FROM X WHERE X.i IN (?, 1)", "SELECT * FROM X WHERE X.i NOT IN (?)"):
        with pytest.raises(trdb.ProgrammingError, match="IN takes one value per item") as info:
            ones.execute(sql, [value])
        assert "IN (?, ?, ...)" in info.value.hint
    assert len(ones.execute("SELECT * FROM X WHERE X.i IN (?, 1)", [0]).fetchall()) == 4


def test_random_fills_with_a_huge_spread_are_checked_not_an_internal_error(ones):
    ones.execute("CREATE TENSOR R SHAPE (4, 4) TILE (2, 2) FILL RANDOM_NORMAL(0, 9223372036854775807, 3)")
    assert ones.execute("SELECT COUNT(*) FROM R").fetchall() == [(4,)]
    for fill, message in (("RANDOM_NORMAL(0, 9223372036854775807, 3) DTYPE int64", "does not fit in int64"),
                          ("RANDOM_NORMAL(0, 1e308, 3)", "would overflow to inf"),
                          ("RANDOM_NORMAL(1e300, 1e300) DTYPE float32", "overflows float32")):
        with pytest.raises(trdb.DataError, match=message):
            ones.execute(f"CREATE TENSOR S SHAPE (4, 4) TILE (2, 2) FILL {fill}")
    assert [row[0] for row in ones.execute("SHOW TENSORS").fetchall()] == ["E", "R", "X"]


@pytest.mark.parametrize("name, content, options", [
    ("bad.parquet", b"not parquet at all", ""), ("bad.parquet", b"PAR1 but not really PAR1", " (LAYOUT long)"),
    ("bad.csv", b"\x00\x01", ""), ("bad.csv", b"a,b,c\n1,2\n", "")])
def test_copy_from_a_file_that_is_not_what_its_name_says_is_a_data_error(ones, tmp_path, name, content, options):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(trdb.DataError, match=f"is not a {name.split('.')[1]} file COPY can read"):
        ones.execute(f"COPY E FROM '{tmp_path / name}'{options}")
    assert ones.execute("SELECT COUNT(*) FROM E").fetchall() == [(0,)]


def test_from_coo_with_complex_values_is_a_data_error(ones):
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    values = np.array([[1 + 2j, 0], [0, 3j]])
    for given in (pd.DataFrame({"r": [0, 1], "c": [0, 1], "v": values[[0, 1], [0, 1]]}), sp.coo_matrix(values),
                  sp.csr_matrix(values)):
        with pytest.raises(trdb.DataError, match="holds complex numbers") as info:
            ones.execute("CREATE TENSOR C FROM COO ? (r, c, v) SHAPE (4, 4) TILE (2, 2)", [given])
        assert ".real" in info.value.hint
    assert not ones.execute("SELECT * FROM X WHERE X.i < 0").fetchall()


@pytest.mark.parametrize("fmt", ["parquet", "csv", "npy"])
def test_copy_on_a_full_disk_is_an_operational_error_with_a_hint(ones, tmp_path, monkeypatch, fmt):
    import errno
    import os

    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    class FullWriter:  # pyarrow's CSVWriter cannot be patched: one that fails as it would on a full disk
        def __init__(self, path, schema):
            open(path, "wb").close()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        write_batch = full

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", full)
    monkeypatch.setattr(pa_csv, "CSVWriter", FullWriter)
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(trdb.OperationalError, match="no space left on the disk") as info:
        ones.execute(f"COPY X TO '{tmp_path / ('x.' + fmt)}'")
    assert "free space" in info.value.hint
    assert os.listdir(tmp_path) == []  # no partial file, no temporary one
    assert ones.execute("SELECT COUNT(*) FROM X").fetchall() == [(4,)]


def test_copy_to_npy_on_a_really_full_disk_is_an_error_not_a_crash(tmp_path):
    """A memory-mapped write to a sparse file on a full disk killed the process (SIGBUS): in a child, on a
    1 MB tmpfs, where this machine lets the tests mount one (as root)."""
    import os

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root; the full-disk test above simulates it")
    try:
        code = textwrap.dedent(f"""
            import os, trdb
            con = trdb.connect(workers=1)
            con.execute("CREATE TENSOR X SHAPE (1024, 1024) TILE (256, 256) FILL ONES")
            for fmt in ("npy", "csv"):
                try:
                    con.execute(f"COPY X TO '{disk}/x.{{fmt}}'")
                    print(fmt, "WRITTEN")
                except trdb.Error as exc:
                    print(fmt, type(exc).__name__, str(exc).splitlines()[0])
            print(sorted(os.listdir({str(disk)!r})))
        """)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"the child died ({done.returncode}): {done.stdout}{done.stderr[-2000:]}"
        lines = done.stdout.splitlines()
        for line in lines[:2]:
            assert "OperationalError no space left on the disk" in line, line
        assert lines[2] == "[]"
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def _tile_file_cases():
    import numpy as np
    import pyarrow as pa

    tiles = pa.FixedShapeTensorArray.from_numpy_ndarray(np.ones((2, 2, 2)))
    shapes = pa.list_(pa.int64())
    return {  # name: (columns of the file, what the error says)
        "string keys": ({"i": ["a", "b"], "j": ["0", "1"], "v": tiles}, "holds string, not integers"),
        "fractional keys": ({"i": [0.5, 1.0], "j": [0.0, 1.0], "v": tiles}, "holds double, not integers"),
        "a NULL key": ({"i": pa.array([0, None], pa.int64()), "j": [0, 1], "v": tiles}, "NULL key"),
        "a key past BIGINT": ({"i": pa.array([2 ** 64 - 1, 1], pa.uint64()), "j": [0, 1], "v": tiles}, "past BIGINT"),
        "a NULL edge shape": ({"i": [0, 1], "j": [0, 1], "v": tiles, "v_shape": pa.array([[2, 2], None], shapes)},
                              "NULL key, tile or tile shape"),
        "an edge shape of 3 axes": ({"i": [0, 1], "j": [0, 1], "v": tiles,
                                     "v_shape": pa.array([[1, 2, 3], [2, 2]], shapes)}, "does not fit inside it"),
        "an edge shape past the tile": ({"i": [0, 1], "j": [0, 1], "v": tiles,
                                         "v_shape": pa.array([[3, 2], [2, 2]], shapes)}, "does not fit inside it"),
        "text edge shapes": ({"i": [0, 1], "j": [0, 1], "v": tiles, "v_shape": ["a", "b"]}, "not a list of integers"),
        "text tiles": ({"i": [0, 1], "j": [0, 1], "v": ["x", "y"]}, "holds string, not numbers"),
    }


@pytest.mark.parametrize("case", sorted(_tile_file_cases()))
def test_copy_from_a_malformed_tile_file_is_a_data_error(ones, tmp_path, case):
    """Columns of the wrong type, NULLs and edge shapes that do not fit were InternalErrors, and fractional
    keys were truncated without a word."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns, message = _tile_file_cases()[case]
    pq.write_table(pa.table(columns), tmp_path / "t.parquet")
    with pytest.raises(trdb.DataError, match=message):
        ones.execute(f"COPY E FROM '{tmp_path / 't.parquet'}' (LAYOUT tiles)")
    assert ones.execute("SELECT COUNT(*) FROM E").fetchall() == [(0,)]


def test_export_on_a_full_disk_is_an_operational_error(ones, tmp_path, monkeypatch):
    import errno
    import json

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(json, "dump", full)
    with pytest.raises(trdb.OperationalError, match="no space left on the disk"):
        ones.execute(f"EXPORT DATABASE '{tmp_path / 'backup'}'")
