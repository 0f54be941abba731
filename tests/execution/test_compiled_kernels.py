"""Compiled elementwise kernels refuse tiles that their types say line up and that do not (tile_math/compile.py)."""
from __future__ import annotations

import numpy as np
import pytest

import trdb


@pytest.fixture
def con():
    con = trdb.connect()
    con.execute("CREATE TENSOR E FROM ? TILE (3, 8) DTYPE float64", [np.arange(320.0).reshape(40, 8)])
    con.execute("CREATE TABLE p (h BIGINT, t BIGINT)")
    yield con
    con.close()


@pytest.mark.parametrize("pairs", [[(13, 2)], [(13, 2)] + [(i % 13, (i + 1) % 13) for i in range(40)]],
                         ids=["one-tuple", "stacked-batch"])
def test_an_edge_tile_met_by_a_full_tile_is_an_error_not_a_broadcast(con, pairs):
    """E's last tile (key 13) holds one row: numpy would broadcast it against a full tile of 3 rows."""
    for h, t in pairs:
        con.execute("INSERT INTO p VALUES (?, ?)", [h, t])
    query = "SELECT SUM(SUMSQ(H.v - U.v)) AS v FROM p JOIN E AS H ON H.i = p.h JOIN E AS U ON U.i = p.t"
    with pytest.raises(trdb.DataError, match=r"tiles of shapes \(1, 8\) and \(3, 8\) do not line up") as failure:
        con.execute(query).fetchall()
    assert "TILE that divides their SHAPE" in failure.value.hint
    with pytest.raises(trdb.DataError, match="do not line up"):
        con.execute("CREATE VIEW loss AS " + query)
        con.execute("SELECT * FROM GRAD(loss, E)").fetchall()


def test_tiles_under_the_same_keys_and_broadcasts_the_types_allow_still_run(con):
    con.execute("INSERT INTO p VALUES (13, 13), (1, 1)")
    con.execute("CREATE TENSOR b FROM ? TILE (8) DTYPE float64", [np.ones(8)])
    e = np.arange(320.0).reshape(40, 8)
    rows = con.execute("SELECT SUM(SUMSQ(H.v * 2 - U.v + b.v)) AS v FROM p JOIN E AS H ON H.i = p.h "
                       "JOIN E AS U ON U.i = p.t JOIN b ON b.i = 0").fetchall()
    assert rows[0][0] == pytest.approx(((e[39:40] + 1) ** 2).sum() + ((e[3:6] + 1) ** 2).sum())


def test_a_projection_run_again_is_compiled_once_and_no_array_it_reads_is_kept(con, monkeypatch):
    from trdb.execution.operators import project
    from trdb.execution.tile_math import compile as compiling
    from trdb.plan import expressions as bx
    compiled = []
    original = compiling.compile_expr
    monkeypatch.setattr(project, "compile_expr", lambda e, b: compiled.append(e) or original(e, b))
    monkeypatch.setattr(project, "_PREPARED", {})
    query = "SELECT E.i, E.j, E.v * 2 + 1 AS v FROM E"
    first = con.execute(query).fetch_tensor()
    after_first = len(compiled)
    con.execute("CREATE TENSOR other SHAPE (2) TILE (2) FILL ONES")  # a write: the plan is looked up again
    np.testing.assert_array_equal(con.execute(query).fetch_tensor(), first)
    assert after_first > 0 and len(compiled) == after_first
    row = np.arange(8.0)
    rows = con.execute("SELECT E.i, E.j, E.v * ? AS v FROM E", [row]).fetch_tensor()
    np.testing.assert_array_equal(rows, np.arange(320.0).reshape(40, 8) * row)
    kept = [node for exprs, *_ in project._PREPARED.values() for e in exprs for node in bx.subexpressions(e)]
    assert kept and not any(isinstance(node, bx.Const) and node.value is row for node in kept)


def test_reshape_and_transpose_views_of_many_tiles_are_numpys(con):
    """Layouts of tiles whose shapes the kernel took once run as numpy's views, the edge tile too."""
    e = np.arange(320.0).reshape(40, 8)
    rows = con.execute("SELECT E.i, E.j, RESHAPE(E.v, (-1, 4)) AS r, TRANSPOSE(E.v) AS t FROM E").fetchall()
    assert len(rows) == 14
    for i, _, r, t in rows:
        tile = e[3 * i:3 * i + 3]
        np.testing.assert_array_equal(r, tile.reshape(-1, 4))
        np.testing.assert_array_equal(t, tile.T)


def test_a_reshape_that_fits_the_full_tiles_but_not_the_edge_tile_is_an_error(con):
    """RESHAPE to (4, 6) fits E's 3 x 8 tiles, which come first, and not its last tile of 1 x 8."""
    with pytest.raises(trdb.DataError, match="RESHAPE"):
        con.execute("SELECT E.i, E.j, RESHAPE(E.v, (4, 6)) AS v FROM E ORDER BY i").fetchall()


def test_explain_analyze_counts_every_layout_call(con):
    """Under EXPLAIN ANALYZE each RESHAPE goes through the kernel's call, which counts its bytes (in and out)."""
    text = "\n".join(row[0] for row in con.execute(
        "EXPLAIN ANALYZE SELECT E.i, E.j, RESHAPE(E.v, (-1, 4)) AS v FROM E").fetchall())
    assert "kernel_bytes=5.1KB (5120)" in text


@pytest.mark.parametrize("expression, expected", [
    ("1 - E.v * 2", lambda e, b: 1 - e * 2),
    ("E.v / (E.v + 1)", lambda e, b: e / (e + 1)),
    ("b.v * (E.v - 1)", lambda e, b: b * (e - 1)),           # the first operand broadcast against the fresh one
    ("E.v + b.v * 2", lambda e, b: e + b * 2),               # the fresh one smaller than the result: no place
    ("POWER(2, E.v / 100)", lambda e, b: 2 ** (e / 100)),  # not an arithmetic operator of the four
])
def test_an_operator_written_into_its_fresh_second_operand_gives_numpys_values(con, expression, expected):
    con.execute("CREATE TENSOR b FROM ? TILE (8) DTYPE float64", [np.linspace(-1, 1, 8)])
    e, b = np.arange(320.0).reshape(40, 8), np.linspace(-1, 1, 8)
    got = con.execute(f"SELECT E.i, E.j, {expression} AS v FROM E JOIN b ON b.i = 0").fetch_tensor()
    np.testing.assert_allclose(got, expected(e, b), rtol=1e-12)


def test_an_upstream_gradient_times_a_fresh_tile_allocates_no_third_tile(con, monkeypatch):
    """`u * (E.v - 1)`: the product is written into the difference (the kernel's own call is not made)."""
    from trdb.catalog.kernel_function import KernelFunction
    called, original = [], KernelFunction.call
    monkeypatch.setattr(KernelFunction, "call", lambda self, backend, args: called.append(self.name)
                        or original(self, backend, args))
    con.execute("CREATE TENSOR u FROM ? TILE (8) DTYPE float64", [np.full(8, 3.0)])
    got = con.execute("SELECT E.i, E.j, u.v * (E.v - 1) AS v FROM E JOIN u ON u.i = 0").fetch_tensor()
    np.testing.assert_array_equal(got, 3.0 * (np.arange(320.0).reshape(40, 8) - 1))
    assert "-" in called and "*" not in called
    called.clear()
    con.execute("CREATE TENSOR n FROM ? TILE (3, 8) DTYPE int64", [np.arange(320).reshape(40, 8)])
    got = con.execute("SELECT n.i, n.j, 0.5 * (n.v - 1) AS v FROM n").fetch_tensor()  # int tile, float result
    np.testing.assert_array_equal(got, 0.5 * (np.arange(320).reshape(40, 8) - 1))
    assert "*" in called
