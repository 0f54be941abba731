"""Kernels on CSR tiles against numpy on the same tiles dense: values, dtypes, and which results stay CSR."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from trdb.catalog.functions import OPERATORS, lookup_function
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.kernels.sparse import is_sparse, stored_form, to_csr

B = NUMPY_BACKEND
RNG = np.random.default_rng(11)


def csr(shape=(6, 5), dtype="float32", density=0.2):
    """A read-only canonical CSR tile with signed values (and its dense twin)."""
    m = scipy.sparse.random_array(shape, density=density, format="csr", dtype=np.float64, rng=RNG)
    m.data = np.where(RNG.random(m.nnz) < 0.5, -1, 1) * (m.data + 0.5)
    if np.dtype(dtype).kind in "iu":
        m.data = np.rint(m.data * 3) + np.sign(m.data)
    tile = to_csr(scipy.sparse.csr_array(m, dtype=dtype))
    for array in (tile.data, tile.indices, tile.indptr):
        array.flags.writeable = False  # a kernel that wrote into its input would fail loudly
    return tile


def dense(shape=(6, 5), dtype="float32"):
    a = RNG.uniform(-2, 2, size=shape).astype(dtype)
    a.flags.writeable = False
    return a


def run(name, *args):
    function = OPERATORS.get(name) or lookup_function(name)
    return function.call(B, list(args))


def oracle(name, *args):
    """The kernel on densified arguments: what the CSR version must equal."""
    function = OPERATORS.get(name) or lookup_function(name)
    return function.call(B, [a.toarray() if is_sparse(a) else a for a in args])


def check(name, *args, sparse: bool):
    got = run(name, *args)
    expected = oracle(name, *args)
    assert is_sparse(got) == sparse, f"{name}: {'CSR' if is_sparse(got) else 'dense'} result"
    values = got.toarray() if is_sparse(got) else np.asarray(got)
    assert values.dtype == np.asarray(expected).dtype
    assert values.shape == np.shape(expected)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("name", ["NEG", "RELU", "ABS", "SQUARE", "TANH"])
def test_unary_kernels_that_keep_zeros_keep_csr(name, dtype):
    check(name, csr(dtype=dtype), sparse=True)


@pytest.mark.parametrize("name", ["EXP", "SIGMOID", "LOG", "ONES_LIKE", "SOFTMAX"])
def test_kernels_that_do_not_keep_zeros_densify(name):
    check(name, csr(), sparse=False)


def test_sqrt_and_power_keep_csr():
    tile = run("ABS", csr())
    check("SQRT", tile, sparse=True)
    check("POWER", tile, 3, sparse=True)
    check("POWER", tile, 0.5, sparse=True)
    check("POWER", tile, 0, sparse=False)  # 0 ** 0 is 1


@pytest.mark.parametrize("scalar", [2.5, -3, 0.0])
def test_product_by_a_scalar_keeps_csr_and_the_dtype(scalar):
    check("*", csr(), scalar, sparse=True)
    check("*", scalar, csr(), sparse=True)
    check("*", csr(dtype="float64"), scalar, sparse=True)


def test_division_by_a_scalar_keeps_csr_unless_it_is_zero():
    check("/", csr(), 4, sparse=True)
    check("/", csr(), -0.5, sparse=True)
    check("/", csr(), 0.0, sparse=False)  # 0 / 0 is NaN: not sparse any more
    check("/", 1.0, csr(), sparse=False)
    check("/", csr(), dense(), sparse=False)


def test_product_by_a_tile_keeps_csr():
    check("*", csr(), dense(), sparse=True)
    check("*", dense(), csr(), sparse=True)
    check("*", csr(), csr(), sparse=True)
    check("*", csr(), dense((5,)), sparse=True)  # a row broadcast over the CSR tile
    check("*", csr(), dense((6, 1)), sparse=True)
    check("*", csr((1, 5)), dense((6, 5)), sparse=False)  # the CSR operand itself is broadcast


def test_sums_of_two_csr_tiles_stay_csr_sums_with_dense_are_dense():
    check("+", csr((20, 20), density=0.03), csr((20, 20), density=0.03), sparse=True)
    check("-", csr((20, 20), density=0.03), csr((20, 20), density=0.03), sparse=True)
    check("+", csr(), dense(), sparse=False)
    check("-", csr(), dense(), sparse=False)
    check("-", dense(), csr(), sparse=False)
    check("+", csr(), 1, sparse=False)
    check("+", csr(dtype="int32"), dense(dtype="float64"), sparse=False)


def test_a_sum_that_fills_in_becomes_dense():
    a, b = csr((20, 20), density=0.08), csr((20, 20), density=0.08)
    got = run("+", a, b)
    assert is_sparse(got) == ((a + b).nnz <= 0.1 * 400)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_matmul_in_every_format(dtype):
    a, b = csr((6, 5), dtype), csr((5, 4), dtype)
    check("MATMUL", a, dense((5, 4), dtype), sparse=False)
    check("MATMUL", dense((3, 6), dtype), a, sparse=False)
    check("MATMUL", a, dense((5,), dtype), sparse=False)
    check("MATMUL", dense((6,), dtype), a, sparse=False)
    check("MATMUL", dense((2, 3, 6), dtype), a, sparse=False)  # a batch: densified
    product = run("MATMUL", a, b)
    np.testing.assert_allclose(product.toarray() if is_sparse(product) else product, a.toarray() @ b.toarray(),
                               rtol=1e-5)


def test_sparse_times_sparse_stays_csr_while_sparse():
    a, b = csr((40, 40), density=0.01), csr((40, 40), density=0.01)
    check("MATMUL", a, b, sparse=True)
    full = csr((40, 40), density=0.3)
    check("MATMUL", full, full, sparse=False)


def test_transpose_keeps_csr():
    check("TRANSPOSE", csr(), sparse=True)
    check("TRANSPOSE", csr(), 1, 0, sparse=True)
    check("TRANSPOSE", csr(), 0, 1, sparse=True)
    check("TRANSPOSE", csr(), -1, -2, sparse=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
@pytest.mark.parametrize("name", ["REDUCE_SUM", "REDUCE_MAX", "REDUCE_MEAN"])
def test_reductions(name, dtype):
    tile = csr(dtype=dtype) if dtype != "bool" else to_csr(scipy.sparse.csr_array(csr().toarray() > 0))
    check(name, tile, sparse=False)
    for axis in (0, 1, -1):
        check(name, tile, axis, sparse=False)


def test_sumsq_cast_greatest_least_zeros_like():
    check("SUMSQ", csr(), sparse=False)
    check("SUMSQ", csr(dtype="int32"), sparse=False)
    check("CAST", csr(), "float64", sparse=True)
    check("CAST", csr(), "bool", sparse=True)
    check("GREATEST", csr(), 0, sparse=True)
    check("GREATEST", csr(), -1.5, sparse=True)
    check("GREATEST", csr(), 1, sparse=False)
    check("LEAST", csr(), 0.5, sparse=True)
    check("LEAST", csr(), csr(), sparse=True)
    check("LEAST", csr(), -1, sparse=False)
    check("ZEROS_LIKE", csr(), sparse=True)


def test_kernels_without_a_sparse_version_densify():
    check("EINSUM", "ij,jk->ik", csr(), dense((5, 3)), sparse=False)
    check("BCE_WITH_LOGITS", csr(), dense(), sparse=False)
    check(">", csr(), 0, sparse=False)


def test_stored_form_follows_the_density_threshold():
    """At most 10% non-zeros (CSR_MAX_DENSITY) is CSR: 10 of 100 is, 11 of 100 is not; 3-d stays dense."""
    tile = np.zeros((10, 10), np.float32)
    tile.flat[:10] = 1
    form, nnz = stored_form(tile)
    assert is_sparse(form) and nnz == 10
    tile.flat[10] = 1
    form, nnz = stored_form(tile)
    assert not is_sparse(form) and nnz == 11
    form, nnz = stored_form(np.zeros((4, 4, 4), np.float32))
    assert not is_sparse(form) and nnz == 0
    explicit_zeros = scipy.sparse.csr_array((np.array([0.0, 2.0]), np.array([0, 3]), np.array([0, 1, 2])),
                                            shape=(2, 10))
    form, nnz = stored_form(explicit_zeros)
    assert is_sparse(form) and nnz == 1 and form.nnz == 1


@pytest.mark.parametrize("spec", ["ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "ji,kj->ki", "ij,jk->ki"])
def test_einsum_matrix_products_in_any_orientation(spec):
    a_shape = (6, 5) if spec[:2] == "ij" else (5, 6)
    b_shape = (5, 4) if spec[3:5] == "jk" else (4, 5)
    check("EINSUM", spec, csr(a_shape), dense(b_shape), sparse=False)
    check("EINSUM", spec, dense(a_shape), csr(b_shape), sparse=False)
    a, b = csr(a_shape, density=0.05), csr(b_shape, density=0.05)
    got = run("EINSUM", spec, a, b)
    np.testing.assert_allclose(got.toarray() if is_sparse(got) else got,
                               np.einsum(spec, a.toarray(), b.toarray()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_einsum_transposes_sums_and_products(dtype):
    tile = csr(dtype=dtype)
    check("EINSUM", "ij->ji", tile, sparse=True)
    check("EINSUM", "ij->ij", tile, sparse=True)
    check("EINSUM", "ij->i", tile, sparse=False)
    check("EINSUM", "ij->j", tile, sparse=False)
    check("EINSUM", "ij->", tile, sparse=False)
    check("EINSUM", "ij,ij->ij", tile, dense(dtype=dtype), sparse=True)
    check("EINSUM", "ij,ji->ij", tile, csr((5, 6), dtype), sparse=True)
    check("EINSUM", "ij,ij->ji", tile, tile, sparse=True)
    check("EINSUM", "ij,jk,kl->il", tile, dense((5, 3), dtype), dense((3, 2), dtype), sparse=False)
    check("EINSUM", "ii->i", csr((5, 5), dtype), sparse=False)
