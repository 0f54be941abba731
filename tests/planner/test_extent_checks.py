"""Kernels whose tiles line up while the whole tensors do not are refused when bound, with the sizes and a caret."""
import numpy as np
import pytest

import trdb

MISMATCHED_PRODUCT = "SELECT A.i, C.j, SUM(MATMUL(A.v, C.v)) AS v FROM A JOIN C ON A.j = C.i GROUP BY A.i, C.j"


@pytest.fixture
def con():
    con = trdb.connect(workers=1)
    con.execute("CREATE TENSOR A (i, j) SHAPE (1000, 800) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 1)")
    con.execute("CREATE TENSOR C (i, j) SHAPE (1000, 600) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 2)")
    con.execute("CREATE TENSOR D (i, j) SHAPE (1024, 512) TILE (256, 256) FILL ONES")
    con.execute("CREATE TENSOR E (i, j) SHAPE (1024, 1024) TILE (256, 256) FILL ONES")
    yield con
    con.close()


@pytest.mark.parametrize("prefix", ["", "EXPLAIN ", "CREATE VIEW p AS "])
def test_a_product_contracting_axes_of_different_sizes_is_refused(con, prefix):
    with pytest.raises(trdb.ProgrammingError) as caught:
        con.execute(prefix + MISMATCHED_PRODUCT)
    text = str(caught.value)
    assert "MATMUL: the whole tensors do not line up (A.v is 1000x800, C.v is 1000x600)" in text
    assert "800 != 1000" in text and "^" in text


def test_even_when_the_sizes_are_whole_tiles(con):
    with pytest.raises(trdb.ProgrammingError, match="D.v is 1024x512, E.v is 1024x1024"):
        con.execute("SELECT D.i, E.j, SUM(MATMUL(D.v, E.v)) AS v FROM D JOIN E ON D.j = E.i GROUP BY D.i, E.j")


def test_elementwise_on_shapes_whose_edges_differ_is_refused(con):
    with pytest.raises(trdb.ProgrammingError, match=r"\+: the whole tensors do not line up"):
        con.execute("SELECT A.i, A.j, A.v + C.v AS v FROM A JOIN C ON A.i = C.i AND A.j = C.j")


def test_elementwise_over_whole_tiles_pads_with_zeros_as_an_outer_join_does(con):
    total = con.execute("SELECT COALESCE(D.i, E.i) AS i, COALESCE(D.j, E.j) AS j, D.v + E.v AS v "
                        "FROM D FULL JOIN E ON D.i = E.i AND D.j = E.j").fetch_tensor()
    expected = np.ones((1024, 1024), np.float32)
    expected[:, :512] += 1
    np.testing.assert_array_equal(total, expected)
