"""blas_einsum (kernels/batched_einsum.py) against numpy's einsum: batch letters, none, outer products,
several batch and contracted letters, letters summed in one operand, both dtypes, strided inputs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from trdb.catalog.einsum_rules import einsum_flops
from trdb.catalog.kernel_args import Arg
from trdb.kernels.batched_einsum import blas_einsum

SIZES = {"b": 3, "h": 4, "s": 5, "t": 6, "k": 7, "i": 2, "j": 3, "m": 4, "n": 5, "p": 2}

SPECS = [
    "shk,thk->hst",   # attention's scores
    "hst,thk->hsk",   # attention's weighted values
    "shk,thk->sht",   # a batch letter inside the output
    "bij,bjk->bik",   # batched matrix product
    "bij,bkj->bki",   # transposed operands and output
    "bhij,bhjk->bhik",  # two batch letters
    "hbij,bhjk->bkhi",  # two batch letters in different orders
    "bijm,bjmk->bik",  # two contracted letters
    "bijm,bmkj->kbi",  # two contracted letters, output reordered
    "ij,jk->ik",      # no batch letter
    "ij,kj->ki",
    "ij,jk->ki",
    "i,j->ij",        # outer product
    "bi,bj->bij",     # batched outer product
    "bi,bj->jbi",
    "bi,bi->b",       # batched inner product
    "ij,ij->",        # full inner product
    "bij,bj->bi",     # batched matrix-vector
    "bj,bij->ib",
    "bij,bjk->bk",    # a free letter of the first operand summed within it
    "bim,bjk->bi",    # letters summed within each operand, no contraction between them
    "ij,jk->kij",     # an output order neither product order gives
]


def _operands(spec: str, dtype, rng):
    terms = spec.split("->")[0].split(",")
    return [rng.standard_normal(tuple(SIZES[c] for c in t)).astype(dtype) for t in terms]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", SPECS)
def test_matches_numpy_einsum(spec, dtype):
    a, b = _operands(spec, dtype, np.random.default_rng(len(spec)))
    got = blas_einsum(np, spec, a, b)
    want = np.einsum(spec, a.astype(np.float64), b.astype(np.float64))
    assert got is not None
    assert got.shape == want.shape and got.dtype == np.result_type(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("spec", ["shk,thk->hst", "bijm,bmkj->kbi", "ij,jk->ik", "bi,bj->jbi"])
def test_non_contiguous_operands(spec):
    rng = np.random.default_rng(3)
    terms = spec.split("->")[0].split(",")
    # each operand a strided view: every other element of a larger array, axes reversed
    views = []
    for t in terms:
        shape = tuple(SIZES[c] for c in t)
        big = rng.standard_normal(tuple(2 * n for n in shape[::-1]))
        views.append(big[tuple(slice(None, None, 2) for _ in shape)].T)
    assert not any(v.flags.c_contiguous for v in views)
    np.testing.assert_allclose(blas_einsum(np, spec, *views), np.einsum(spec, *views), rtol=1e-12, atol=1e-12)


def test_mixed_dtypes_promote_as_numpy_does():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 5, 7)).astype(np.float32)
    b = rng.standard_normal((6, 4, 7))
    got = blas_einsum(np, "hsk,thk->hst", a, b)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.einsum("hsk,thk->hst", a, b), rtol=1e-6)


def test_result_is_row_major_when_the_output_reorders_the_product():
    a, b = _operands("shk,thk->sht", np.float64, np.random.default_rng(5))
    assert blas_einsum(np, "shk,thk->sht", a, b).flags.c_contiguous


def test_ellipsis_and_implicit_specs_are_resolved():
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 5, 2))
    np.testing.assert_allclose(blas_einsum(np, "...ij,...jk->...ik", a, b), a @ b)
    np.testing.assert_allclose(blas_einsum(np, "bij,bjk", a, b), np.einsum("bij,bjk", a, b))


@pytest.mark.parametrize("spec, shapes", [
    ("ii,ij->j", [(3, 3), (3, 4)]),          # a diagonal
    ("bij,bjk->bikk", [(2, 3, 4), (2, 4, 5)]),  # a repeated output letter
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # three operands
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),  # b broadcast from size 1
])
def test_declines_what_it_does_not_run(spec, shapes):
    operands = [np.ones(s) for s in shapes]
    assert blas_einsum(np, spec, *operands[:2]) is None


def test_declines_sparse_scalar_and_integer_operands():
    dense = np.ones((3, 3))
    assert blas_einsum(np, "ij,jk->ik", scipy.sparse.csr_array(dense), dense) is None
    assert blas_einsum(np, "ij,jk->ik", dense, scipy.sparse.csr_array(dense)) is None
    assert blas_einsum(np, ",jk->jk", np.float64(2.0), dense) is None
    assert blas_einsum(np, "ij,jk->ik", np.ones((3, 3), dtype=np.int64), dense) is None


@pytest.mark.parametrize("spec, shapes", [
    ("shk,thk->hst", [(256, 8, 64), (256, 8, 64)]),
    ("hst,thk->hsk", [(8, 256, 256), (256, 8, 64)]),
    ("bhij,bhjk->bhik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
])
def test_cost_model_counts_a_batched_contraction_as_two_flops_per_letter_combination(spec, shapes):
    args = [Arg(shape=None, dtype=None, const=spec)] + [Arg(shape=s, dtype=np.dtype(np.float32)) for s in shapes]
    letters = dict(zip("".join(spec.split("->")[0].split(",")), [n for s in shapes for n in s]))
    assert einsum_flops(args) == 2 * int(np.prod(list(letters.values())))


def test_the_einsum_kernel_runs_batch_letters_as_one_batched_gemm(monkeypatch):
    from trdb.kernels import batched_einsum, functions
    calls = []
    real = batched_einsum.blas_einsum
    monkeypatch.setattr(batched_einsum, "blas_einsum", lambda *args: calls.append(args[1]) or real(*args))
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((16, 4, 8)), rng.standard_normal((12, 4, 8))
    np.testing.assert_allclose(functions.einsum(np, "shk,thk->hst", q, k), np.einsum("shk,thk->hst", q, k),
                               rtol=1e-12)
    assert calls == ["shk,thk->hst"]
