"""CREATE TENSOR ... FROM 'file.npy' | ?: hostile files and values a dtype cannot hold are DataErrors, never lost."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import trdb


def write_header(path, shape, descr="<f4", body=b""):
    """A .npy file whose header claims `shape` of `descr`, followed by `body`."""
    with open(path, "wb") as file:
        np.lib.format.write_array_header_1_0(file, {"descr": descr, "fortran_order": False, "shape": shape})
        file.write(body)
    return path


def tensors(con) -> set[str]:
    return {row[0] for row in con.execute("SHOW TENSORS").fetchall()}


def test_header_claiming_more_than_the_file_holds_is_truncated(con, tmp_path):
    path = write_header(tmp_path / "huge.npy", (100000, 100000), body=b"\0" * 64)
    with pytest.raises(trdb.DataError, match=r"is truncated: its header says 40000000000 bytes .* the file has 64"):
        con.execute(f"CREATE TENSOR T FROM '{path}' TILE (1000, 1000)")
    path = write_header(tmp_path / "short.npy", (4, 4), descr="<f8", body=b"\0" * 120)
    with pytest.raises(trdb.DataError, match="header says 128 bytes"):
        con.execute(f"CREATE TENSOR T FROM '{path}' TILE (2, 2)")
    assert "T" not in tensors(con)


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"\x93NUM", "not a valid .npy file"),
    (b"PK\x03\x04 a zip file, as np.savez writes", "not a valid .npy file"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': 7}     ", "not a valid .npy file"),
    (b"\x93NUMPY\x09\x00\x10\x00{}              ", "version 9.0"),
])
def test_files_that_are_not_npy(con, tmp_path, content, message):
    path = tmp_path / "bad.npy"
    path.write_bytes(content)
    with pytest.raises(trdb.DataError, match=message):
        con.execute(f"CREATE TENSOR T FROM '{path}' TILE (2)")


def test_negative_shape_and_directories(con, tmp_path):
    with pytest.raises(trdb.DataError, match="shape"):
        con.execute(f"CREATE TENSOR T FROM '{write_header(tmp_path / 'neg.npy', (-4,))}' TILE (2)")
    with pytest.raises(trdb.OperationalError, match="directory"):
        con.execute(f"CREATE TENSOR T FROM '{tmp_path}' TILE (2)")


def test_complex_values_are_refused_not_truncated(con, tmp_path):
    values = np.array([[1 + 2j, 3], [0, 4j]])
    np.save(tmp_path / "c.npy", values)
    with pytest.raises(trdb.DataError, match="complex") as caught:
        con.execute(f"CREATE TENSOR T FROM '{tmp_path / 'c.npy'}' TILE (2, 2)")
    assert "np.real" in caught.value.hint
    for source in (values, values.astype(np.complex64), scipy.sparse.csr_array(values)):
        with pytest.raises(trdb.DataError, match="complex"):
            con.execute("CREATE TENSOR T FROM ? TILE (2, 2)", [source])
        with pytest.raises(trdb.DataError, match="complex"):
            con.execute("CREATE TENSOR T FROM ? TILE (2, 2) DTYPE float64", [source])
    con.execute("CREATE TENSOR T FROM ? TILE (2, 2)", [np.real(values)])  # the hint works
    np.testing.assert_array_equal(con.execute("SELECT * FROM T").fetch_tensor(), np.real(values))


def test_other_dtypes_are_refused(con, tmp_path):
    for values in (np.array([1, 2], dtype="m8[s]"), np.array([b"ab", b"c"]), np.array([(1, 2.0)], "i4,f8")):
        np.save(tmp_path / "x.npy", values)
        with pytest.raises(trdb.DataError, match="cannot store an array of dtype"):
            con.execute(f"CREATE TENSOR T FROM '{tmp_path / 'x.npy'}' TILE (2)")


def test_float_overflow_into_float32_is_refused_with_its_position(con, tmp_path):
    values = np.ones((6, 6))
    values[5, 1] = 1e300
    with pytest.raises(trdb.DataError, match=r'"T": the value 1e\+300 at \[5, 1\] does not fit in float32') as caught:
        con.execute("CREATE TENSOR T FROM ? TILE (4, 4) DTYPE float32", [values])
    assert "float64" in caught.value.hint
    np.save(tmp_path / "big.npy", values)
    with pytest.raises(trdb.DataError, match="would become inf"):
        con.execute(f"CREATE TENSOR T FROM '{tmp_path / 'big.npy'}' TILE (4, 4) DTYPE float32")
    with pytest.raises(trdb.DataError, match=r"at \[5, 1\]"):
        con.execute("CREATE TENSOR T FROM ? TILE (4, 4) DTYPE float32", [scipy.sparse.csr_array(values)])
    with pytest.raises(trdb.DataError, match="float16"):
        con.execute("CREATE TENSOR T FROM ? TILE (4, 4) DTYPE float16", [values * 0 + 70000])
    assert "T" not in tensors(con)


def test_the_misfit_reported_is_the_first_in_tile_order_however_the_tiles_are_cut(con, monkeypatch):
    # a row of small tiles is cast at once; the value reported is still the first tile's, as tile by tile
    from trdb.ingest import tiling

    values = np.ones((8, 12))
    values[0, 9] = 1e300  # tile (0, 2), first in C order
    values[3, 1] = -1e300  # tile (0, 0), first in tile order
    values[6, 0] = 1e300
    for chunk in (tiling.CHUNK_BYTES, 1):  # the row of tiles at once, and tile by tile
        monkeypatch.setattr(tiling, "CHUNK_BYTES", chunk)
        with pytest.raises(trdb.DataError, match=r"the value -1e\+300 at \[3, 1\] does not fit in float32"):
            con.execute("CREATE TENSOR T FROM ? TILE (4, 4) DTYPE float32", [values])
        assert "T" not in tensors(con)
    con.execute("CREATE TENSOR T FROM ? TILE (4, 4) DTYPE float32", [np.clip(values, -1, 1)[:, :11]])
    np.testing.assert_array_equal(con.execute("SELECT * FROM T").fetch_tensor(), np.clip(values, -1, 1)[:, :11])


def test_default_float32_refuses_overflow_too(con):
    values = np.array([1.0, 2.0], dtype=np.longdouble)  # not a trdb dtype: stored as the default float32
    values[1] = np.longdouble(10) ** 400
    if np.isinf(values[1]):
        pytest.skip("long double is double on this platform")
    with pytest.raises(trdb.DataError, match="does not fit in float32"):
        con.execute("CREATE TENSOR T FROM ? TILE (2)", [values])


def test_nan_and_inf_already_in_the_source_are_kept(con):
    values = np.array([[np.nan, np.inf], [-np.inf, 3.4e38]])
    con.execute("CREATE TENSOR T FROM ? TILE (2, 2) DTYPE float32", [values])
    np.testing.assert_array_equal(con.execute("SELECT * FROM T").fetch_tensor(), values.astype(np.float32))


def test_integers_out_of_int32_range_are_refused(con, tmp_path):
    np.save(tmp_path / "i.npy", np.array([1, -2 ** 40, 3], dtype=np.int64))
    with pytest.raises(trdb.DataError, match=r"-1099511627776 at \[1\] does not fit in int32") as caught:
        con.execute(f"CREATE TENSOR T FROM '{tmp_path / 'i.npy'}' TILE (2) DTYPE int32")
    assert "int64" in caught.value.hint
    for bad in (np.array([1.0, np.nan]), np.array([1.0, 2.0 ** 31]), np.array([2 ** 63], dtype=np.uint64)):
        with pytest.raises(trdb.DataError, match="does not fit in int"):
            con.execute("CREATE TENSOR T FROM ? TILE (2) DTYPE int32", [bad])
    edge = np.array([2 ** 31 - 1, -2 ** 31], dtype=np.int64)
    con.execute("CREATE TENSOR T FROM ? TILE (2) DTYPE int32", [edge])
    np.testing.assert_array_equal(con.execute("SELECT * FROM T").fetch_tensor(), edge)


def test_big_endian_and_fortran_files_load(con, tmp_path):
    big = np.arange(12, dtype=">f8").reshape(3, 4)
    np.save(tmp_path / "be.npy", big)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)))
    con.execute(f"CREATE TENSOR B FROM '{tmp_path / 'be.npy'}' TILE (2, 2)")
    con.execute(f"CREATE TENSOR F FROM '{tmp_path / 'f.npy'}' TILE (2, 3)")
    np.testing.assert_array_equal(con.execute("SELECT * FROM B").fetch_tensor(), big)
    np.testing.assert_array_equal(con.execute("SELECT * FROM F").fetch_tensor(), np.arange(12).reshape(3, 4))
    assert "float64" in str(con.execute("DESCRIBE B").fetchall())
