"""numpy's and opt_einsum's own einsum test expressions (einsum_cases.json) against numpy.einsum.

Every case numpy accepts runs through the per-tuple kernel (its shape rule and its call, as a
statement runs them) and as `EINSUM(...)` in FROM in one tiling, chosen by the case's position in
the file so that the cases spread evenly over them (the run stays a few seconds per tiling): whole
tiles (where `SELECT EINSUM('spec', T0.v, ...)` is checked too), split tiles with ragged edges, mixed
tilings (a letter cut differently in different operands, so the plan re-cuts), half the tiles absent,
CSR tiles (cases of matrices and vectors, sizes tripled so tiles are sparse enough to be CSR) and two
workers. These run decomposed into joins and sums of tiles; split and mixed tilings run once more as
one call on whole arrays (optimizer/whole_products.py: every tile present). Every case numpy refuses is
a ProgrammingError, in FROM and in the per-tuple kernel alike.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import trdb
from trdb.catalog.functions import lookup_function
from trdb.catalog.kernel_args import Arg
from trdb.kernels.numpy_backend import NUMPY_BACKEND

DOCUMENT = json.loads(Path(__file__).with_name("einsum_cases.json").read_text())
CASES = [(n, spec, [tuple(s) for s in shapes]) for n, (_, spec, shapes) in enumerate(DOCUMENT["cases"])]
TILINGS = ("whole", "split", "mixed", "absent", "csr", "workers2")


def numpy_accepts(spec, shapes) -> bool:
    try:
        np.einsum(spec, *[np.ones(s) for s in shapes])
    except ValueError:
        return False
    return True


ACCEPTED = [c for c in CASES if numpy_accepts(c[1], c[2])]
REJECTED = [c for c in CASES if not numpy_accepts(c[1], c[2])]


def eligible(shapes) -> list[str]:
    """The tilings that mean something for these operands. With 6 or more operands, choosing the
    tile sizes alone takes seconds when tiles are split: those cases run whole and half absent."""
    if len(shapes) >= 6:
        return ["whole", "absent"]
    found = ["whole", "split", "absent", "workers2"]
    if len(shapes) > 1:
        found.append("mixed")
    if shapes and max(len(s) for s in shapes) <= 2 and any(len(s) == 2 for s in shapes):
        found.append("csr")
    return [t for t in TILINGS if t in found]


def balanced_tilings(cases) -> dict[int, str]:
    """The one tiling each case runs in: of those that mean something for it, the one fewest cases
    before it in the file took (ties to the first), so that every tiling gets its share."""
    taken: Counter = Counter()
    chosen = {}
    for n, _, shapes in cases:
        chosen[n] = min(eligible(shapes), key=lambda tiling: taken[tiling])
        taken[chosen[n]] += 1
    return chosen


TILING = balanced_tilings(ACCEPTED)


def split_tile(n: int) -> int:
    return max(1, -(-n // 2))  # two tiles an axis, the second one shorter wherever n is odd


def tile_of(tiling: str, shape: tuple, position: int) -> tuple:
    if tiling == "whole":
        return tuple(max(n, 1) for n in shape)
    if tiling == "mixed" and position % 2:
        return tuple(n - 1 if n >= 3 else max(n, 1) for n in shape)  # cut unlike the even operands
    if tiling == "csr":
        return tuple(min(n, 5) if n else 1 for n in shape)
    return tuple(split_tile(n) for n in shape)


def scaled(shapes) -> list[tuple]:
    """Sizes above 1 tripled, alike for alike: the same case, large enough for sparse tiles."""
    return [tuple(3 * n if n > 1 else n for n in s) for s in shapes]


def operand(rng, tiling: str, shape: tuple, tile: tuple) -> np.ndarray:
    array = rng.standard_normal(shape)
    if tiling == "csr" and len(shape) == 2:
        array *= rng.random(shape) < 0.06  # ~6% non-zeros: tiles at most 10% full are CSR
    if tiling == "absent" and shape:
        grid = [math.ceil(n / t) for n, t in zip(shape, tile)]
        for number, index in enumerate(np.ndindex(*grid)):
            if number % 2:
                array[tuple(slice(i * t, (i + 1) * t) for i, t in zip(index, tile))] = 0
    return array


def load(cur, name: str, array: np.ndarray, tile: tuple) -> None:
    cur.execute(f"CREATE TENSOR {name} FROM ? TILE ({', '.join(map(str, tile))}) "
                "DTYPE float64", [array])


def from_result(cur, spec: str, names: list[str], shape: tuple) -> np.ndarray:
    cur.execute(f"SELECT * FROM EINSUM('{spec}', {', '.join(names)})")
    if shape:
        return cur.fetch_tensor(shape=shape)
    rows = cur.fetchall()
    return np.asarray(rows[0][-1] if rows else 0.0)


def per_tuple_result(cur, spec: str, names: list[str]) -> np.ndarray:
    args = ", ".join(f"{n}.v" for n in names)
    return np.asarray(cur.execute(f"SELECT EINSUM('{spec}', {args}) FROM {', '.join(names)}").fetchall()[0][0])


@pytest.fixture(scope="module")
def db():
    connection = trdb.connect()
    connection.cursor().execute("SET workers = 1")
    connection.cursor().execute("SET dense_einsum_bytes = 0")
    yield connection
    connection.close()


def run_case(cur, n: int, spec: str, shapes: list, tiling: str) -> None:
    rng = np.random.default_rng(n)
    if tiling == "csr":
        shapes = scaled(shapes)
    names = [f"c{n}_{tiling}_{k}" for k in range(len(shapes))]
    arrays = []
    for k, (name, shape) in enumerate(zip(names, shapes)):
        tile = tile_of(tiling, shape, k)
        arrays.append(operand(rng, tiling, shape, tile))
        load(cur, name, arrays[-1], tile)
    expected = np.einsum(spec, *arrays)
    if tiling == "workers2":
        cur.execute("SET workers = 2")
    try:
        got = from_result(cur, spec, names, expected.shape)
    finally:
        if tiling == "workers2":
            cur.execute("SET workers = 1")
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    if tiling in ("split", "mixed"):
        cur.execute("RESET dense_einsum_bytes")
        try:
            got = from_result(cur, spec, names, expected.shape)
        finally:
            cur.execute("SET dense_einsum_bytes = 0")
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    if tiling == "whole" and all(math.prod(s) for s in shapes):
        got = per_tuple_result(cur, spec, names)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def kernel_result(spec: str, arrays: list) -> np.ndarray:
    """The per-tuple kernel as a statement runs it: the shape rule at bind time, then the call."""
    function = lookup_function("EINSUM")
    shape = function.infer([Arg(None, None, spec)] + [Arg(a.shape, a.dtype) for a in arrays]).shape
    result = np.asarray(function.call(NUMPY_BACKEND, [spec, *arrays]))
    assert result.shape == shape
    return result


@pytest.mark.parametrize("n, spec, shapes", ACCEPTED, ids=[f"{c[0]}:{c[1]}" for c in ACCEPTED])
def test_accepted_expression_matches_numpy(db, n, spec, shapes):
    arrays = [np.random.default_rng(n).standard_normal(s) for s in shapes]
    np.testing.assert_allclose(kernel_result(spec, arrays), np.einsum(spec, *arrays), rtol=1e-9, atol=1e-9)
    cur = db.cursor()
    run_case(cur, n, spec, shapes, TILING[n])


@pytest.mark.parametrize("n, spec, shapes", REJECTED, ids=[f"{c[0]}:{c[1]}" for c in REJECTED])
def test_rejected_expression_is_a_programming_error(db, n, spec, shapes):
    cur = db.cursor()
    names = [f"r{n}_{k}" for k in range(len(shapes))]
    for name, shape in zip(names, shapes):
        load(cur, name, np.ones(shape), tile_of("whole", shape, 0))
    with pytest.raises(trdb.ProgrammingError):
        from_result(cur, spec, names, ())
    with pytest.raises(trdb.ProgrammingError):
        per_tuple_result(cur, spec, names)


def test_cases_come_from_both_suites_and_cover_every_tiling():
    sources = DOCUMENT["sources"]
    assert all(len(s["commit"]) == 40 for s in sources.values())
    suites = Counter(suite for c in DOCUMENT["cases"] for suite in c[0].split("+"))
    assert suites["numpy"] > 150 and suites["opt_einsum"] > 60, suites
    coverage = Counter(TILING.values())
    assert set(coverage) == set(TILINGS) and min(coverage.values()) >= 15, coverage
    assert len(REJECTED) >= 20 and any("..." in c[1] for c in ACCEPTED)
