"""Random composed queries (joins, rekeys, filters, kernels, aggregates) checked against numpy.

Each seed draws tensors and a query from the small grammar in random_queries.py; the oracle
computes the same thing tile by tile with numpy, following the relational semantics of
LANGUAGE.md §4. Re-run one case with `pytest tests/test_random_queries.py -k seed007`, or print
it with `python -c "import sys; sys.path.insert(0, 'tests'); import helpers.random_queries as r;
print(r.build_case(7).describe())"`.
"""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from helpers.random_queries import build_case, grid, tile_shape
from trdb.config.unit_costs import MIN_PARALLEL_COST

SEEDS = list(range(50))

# Seeds beyond the first 50 that once exposed an engine bug, kept as regression cases: COUNT(*)
# without GROUP BY over no tuples gave NULL instead of 0 with workers >= 2 (fixed). Seeds 0-2500
# (with element-sparse, CSR-tiled tensors among them) pass at workers 1, 2 and 3 (swept by hand;
# not run in CI).
REGRESSION_SEEDS = (593, 1538)


# ---- checking a result against the oracle ---------------------------------------------------------

def tolerance(expected):
    """Per-element tolerance from the float32 oracle's distance to float64, and the magnitude."""
    drift = max((float(np.max(np.abs(t64 - t32), initial=0)) for t64, t32 in expected.tiles.values()),
                default=0.0)
    scale = expected.maxabs()
    return lambda ref: 8 * drift + 1e-5 * scale + 1e-4 * np.abs(ref) + 1e-6


def check_rows(case, rows):
    """Problems found comparing fetchall() rows with the oracle, tile by tile (empty: all good)."""
    exp = case.expected
    tol = tolerance(exp)
    if exp.rank == 0:
        want = ([exp.tiles[()][0]] if exp.tiles else []) + ([exp.counts] if exp.counts is not None else [])
        if len(rows) != 1 or len(rows[0]) != len(want):
            return [f"expected one row of {len(want)} column(s), got {rows!r:.300}"]
        problems = []
        for got, ref in zip(rows[0], want):
            if isinstance(ref, int):
                if got is None or not (np.size(got) == 1 and int(np.asarray(got).reshape(())) == ref):
                    problems.append(f"COUNT(*): expected {ref}, got {got!r}")
            elif got is None or np.size(got) != 1 or not abs(float(np.asarray(got).reshape(())) - ref) <= tol(ref):
                problems.append(f"scalar: expected {float(ref)!r}, got {got!r}")
        return problems
    problems, seen = [], {}
    g = grid(exp.shape, exp.tile)
    for row in rows:
        if len(row) != exp.rank + 1:
            problems.append(f"row has {len(row)} columns, expected {exp.rank + 1}: {row!r:.200}")
            continue
        key, got = tuple(int(k) for k in row[:-1]), np.asarray(row[-1])
        if key in seen:
            problems.append(f"duplicate key {key}")
        seen[key] = got
        if not all(0 <= k < n for k, n in zip(key, g)):
            problems.append(f"key {key} outside the tile grid {g}")
            continue
        want_shape = tile_shape(exp.shape, exp.tile, key)
        if got.shape != want_shape:
            problems.append(f"tile {key}: shape {got.shape}, expected {want_shape}")
            continue
        if got.dtype != np.float32:
            problems.append(f"tile {key}: dtype {got.dtype}, expected float32")
        ref = exp.tiles[key][0] if key in exp.tiles else np.zeros(want_shape)
        bad = np.abs(got - ref) > tol(ref)
        if np.any(bad):
            where = tuple(int(w[0]) for w in np.nonzero(bad))
            problems.append(f"tile {key} ({'present' if key in exp.tiles else 'absent'} in the oracle): "
                            f"{int(bad.sum())}/{bad.size} values differ, e.g. at {where} got "
                            f"{got[where]!r} expected {ref[where]!r}; max error "
                            f"{float(np.max(np.abs(got - ref))):.3g}")
    for key, (t64, _) in exp.tiles.items():
        if key not in seen and np.any(np.abs(t64) > tol(0 * t64)):
            problems.append(f"tile {key} missing (expected nonzero, max |v| {np.max(np.abs(t64)):.3g})")
    if case.order_by:
        sort_key = lambda r: tuple(-int(r[ax]) if d else int(r[ax]) for ax, d in case.order_by)
        if [sort_key(r) for r in rows] != sorted(sort_key(r) for r in rows):
            problems.append(f"rows are not in ORDER BY order {case.order_by}")
    return problems


def check_dense(case, dense):
    """Problems comparing fetch_tensor(shape=...) with the oracle's dense tensor."""
    want = case.expected.dense()
    if np.shape(dense) != want.shape:
        return [f"fetch_tensor shape {np.shape(dense)}, expected {want.shape}"]
    error = np.abs(np.asarray(dense, dtype=np.float64) - want)
    bad = error > tolerance(case.expected)(want)
    if np.any(bad):
        return [f"fetch_tensor: {int(bad.sum())} values differ, max error {error.max():.3g}"]
    return []


def run_case(case):
    con = trdb.connect()
    try:
        cur = con.cursor()
        for sql, array, _ in case.setup:
            cur.execute(sql, None if array is None else [array])
        cur.execute(case.sql)
        rows = cur.fetchall()
        dense = None
        if case.expected.rank and case.seed % 3 == 0:
            # fetch_tensor on a second run: absent tiles (and missing trailing ones) are zeros.
            cur.execute(case.sql)
            dense = cur.fetch_tensor(shape=case.expected.shape)
        return rows, dense
    finally:
        con.close()


def check_seed(seed):
    """The random query of `seed` run and checked against numpy; a failure shows the case."""
    case = build_case(seed)
    try:
        rows, dense = run_case(case)
    except Exception as error:  # the failure shows the case, whatever the engine raised
        pytest.fail(f"{case.describe()}\nraised {type(error).__name__}: {error}")
    problems = check_rows(case, rows) + (check_dense(case, dense) if dense is not None else [])
    assert not problems, f"{case.describe()}\n" + "\n".join(problems[:8])


@pytest.mark.parametrize("seed", SEEDS + list(REGRESSION_SEEDS), ids=lambda s: f"seed{s:03d}")
def test_random_query(seed):
    check_seed(seed)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s:03d}")
def test_random_query_at_the_default_parallel_cost(seed, monkeypatch):
    """The same cases where most plans run on one partition, as a user's do (the suite sets 0)."""
    monkeypatch.setenv("TRDB_MIN_PARALLEL_COST", str(MIN_PARALLEL_COST))
    monkeypatch.setenv("TRDB_WORKERS", "2")
    test_random_query(seed)


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s:03d}")
def test_random_query_run_again_after_writes_elsewhere(seed, monkeypatch):
    """Run again after a write to another tensor, a query runs the plans it ran last time as a program
    (pipeline/step_program.py); its results stay the oracle's. Seeds 0-500 pass at workers 1, 2 and 3 (swept by
    hand; not run in CI)."""
    from trdb.pipeline.query import Pipeline
    replayed = []
    carry = Pipeline.carry
    monkeypatch.setattr(Pipeline, "carry", lambda self, *args: replayed.append(1) or carry(self, *args))
    case = build_case(seed)
    con = trdb.connect()
    try:
        cur = con.cursor()
        for sql, array, _ in case.setup:
            cur.execute(sql, None if array is None else [array])
        cur.execute("CREATE TENSOR written_elsewhere SHAPE (2) TILE (2) FILL ONES")
        for _ in range(3):
            rows = cur.execute(case.sql).fetchall()
            problems = check_rows(case, rows)
            assert not problems, f"{case.describe()}\n" + "\n".join(problems[:8])
            cur.execute("UPDATE written_elsewhere SET v = written_elsewhere.v + 1")
    finally:
        con.close()
    assert len(replayed) == 2  # the second and third runs
