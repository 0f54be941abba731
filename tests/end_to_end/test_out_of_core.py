"""Tensors several times memory_limit: filled, scanned, transformed, joined and multiplied in a child process,
with results equal to numpy and the child's peak resident memory bounded by the limit plus a margin.

The child (a file database, `memory_limit = '8MB'`, a 2816 x 2816 float32 tensor of 30 MiB in
256 x 256 tiles: nearly four times the limit) measures its peak resident memory (VmHWM: the
`ru_maxrss` of getrusage starts a child at its parent's peak) after a small warm-up statement (the
fixed cost of DuckDB's first queries and BLAS's buffers) and again after the statements; the growth
must stay below the limit plus MARGIN. The margin holds what the limit does not bound by design:
DuckDB's own part (at least 32 MB, beside trdb's half of a limit below 64 MB), each operator's
guaranteed minimum (a few tiles), and what the allocators keep of memory freed. An engine that held
the tensor, or its copies, in memory would grow by several times 30 MiB: with no limit these
statements grow the process by about 380 MB. RLIMIT_AS is only a guard.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import trdb

pytestmark = [pytest.mark.out_of_core, pytest.mark.on_cpu]

LIMIT_MB = 8
# DuckDB's 32 MB, the per-operator minimums (a few tiles each), and what the allocators keep of memory freed
# (glibc's arenas, pyarrow's pool): measured 85 MB at this limit, against 377 MB with no limit
MARGIN_MB = 96
GUARD = 4 << 30

CHILD = textwrap.dedent("""
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, ({guard}, {guard}))
    import numpy as np
    import trdb

    def peak_mb():  # ru_maxrss of this image (VmHWM): getrusage's starts at the parent's peak
        return int([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]) / 1024

    folder, n, t = sys.argv[1], {n}, {t}
    g = n // t
    os.makedirs(os.path.join(folder, "temp"), exist_ok=True)
    con = trdb.connect(os.path.join(folder, "big.trdb"))
    cur = con.cursor()
    cur.execute("SET memory_limit = '{limit}MB'")
    cur.execute("SET temp_directory = '" + os.path.join(folder, "temp") + "'")
    cur.execute("SET workers = 2")
    # the fixed cost of a first statement (DuckDB's first query, BLAS's per-thread buffers) is not the data's
    cur.execute("CREATE TENSOR W0 SHAPE (256, 256) TILE (256, 256) FILL RANDOM_NORMAL(0, 1, 1)")
    cur.execute("SELECT SUM(SUMSQ(W0.v)) FROM W0 JOIN W0 AS W1 ON W0.i = W1.i").fetchall()
    cur.execute("SELECT W0.i, W1.j, SUM(MATMUL(W0.v, W1.v)) FROM W0 JOIN W0 AS W1 ON W0.j = W1.i GROUP BY W0.i, W1.j")
    base = peak_mb()
    report = {{}}
    steps = [
        ("fill", f"CREATE TENSOR A SHAPE ({{n}}, {{n}}) TILE ({{t}}, {{t}}) FILL RANDOM_NORMAL(0, 1, 7)"),
        ("fill_v", f"CREATE TENSOR V SHAPE ({{n}}, 256) TILE ({{t}}, {{t}}) FILL RANDOM_UNIFORM(-1, 1, 8)"),
        ("scan", "SELECT SUM(SUMSQ(A.v)), COUNT(*) FROM A"),
        ("elementwise", "CREATE TENSOR B AS SELECT A.i, A.j, RELU(A.v) AS v FROM A"),
        ("join", "CREATE TENSOR C AS SELECT A.i, A.j, A.v + TRANSPOSE(B.v) AS v FROM A JOIN B "
                 "ON A.i = B.j AND A.j = B.i"),
        ("matmul", "CREATE TENSOR R AS SELECT A.i, V.j, SUM(MATMUL(A.v, V.v)) AS v FROM A JOIN V ON A.j = V.i "
                   "GROUP BY A.i, V.j"),
    ]
    for name, sql in steps:
        try:
            cur.execute(sql)
            rows = cur.fetchall() if cur.description else None
        except trdb.Error as exc:
            report["failed"] = [name, sql, type(exc).__name__ + ": " + " ".join(str(exc).split())[:600]]
            break
        if name == "scan":
            report["scan"] = [float(rows[0][0]), int(rows[0][1])]
    report["growth_mb"] = peak_mb() - base
    cur.execute("SET memory_limit = '1GB'")  # the checks below read tiles one by one: measured above, not here

    def tile(name, a, b):
        return np.asarray(cur.execute(f"SELECT {{name}}.v FROM {{name}} WHERE {{name}}.i = {{a}} AND {{name}}.j = {{b}}")
                          .fetchone()[0], np.float64)

    def band(name, a):
        rows = cur.execute(f"SELECT {{name}}.j, {{name}}.v FROM {{name}} WHERE {{name}}.i = {{a}} ORDER BY j").fetchall()
        return np.hstack([np.asarray(v, np.float64) for _, v in rows])

    if "failed" not in report:
        report["sumsq"] = sum(float(np.sum(band("A", a) ** 2)) for a in range(g))
        wrong = []
        for a, b in [(0, 0), (g - 1, g - 1), (1, 5), (7, 2)]:
            if not np.allclose(tile("B", a, b), np.maximum(tile("A", a, b), 0)):
                wrong.append(("B", a, b))
            if not np.allclose(tile("C", a, b), tile("A", a, b) + np.maximum(tile("A", b, a), 0).T, atol=1e-5):
                wrong.append(("C", a, b))
        V = np.vstack([band("V", a) for a in range(g)])
        for a in (0, g - 1):
            want = band("A", a) @ V
            got = band("R", a)
            if not np.allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max()):
                wrong.append(("R", a))
        report["wrong"] = wrong
    con.close()
    print(json.dumps(report))
""")


def run_child(folder, n: int, t: int) -> dict:
    script = CHILD.format(guard=GUARD, n=n, t=t, limit=LIMIT_MB)
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_tensor_four_times_memory_limit_is_processed_within_it(tmp_path) -> None:
    n, t = 2816, 256
    report = run_child(tmp_path, n, t)
    assert "failed" not in report, "statement {0!r} failed: {2}\n{1}".format(*report["failed"])
    total, tiles = report["scan"]
    assert tiles == (n // t) ** 2
    assert abs(total - report["sumsq"]) <= 1e-4 * report["sumsq"], (total, report["sumsq"])
    assert report["wrong"] == []
    assert report["growth_mb"] < LIMIT_MB + MARGIN_MB, \
        f"peak resident memory grew by {report['growth_mb']:.0f} MB (limit {LIMIT_MB} MB + margin {MARGIN_MB} MB)"


def test_duckdb_spills_into_the_default_temp_directory(tmp_path) -> None:
    """A write larger than DuckDB's part of the budget makes DuckDB spill into `<temp_directory>/trdb-<pid>-duckdb`;
    the default temp_directory (`<database file>.tmp`) need not exist beforehand."""
    path = str(tmp_path / "db.trdb")
    con = trdb.connect(path)
    try:
        cur = con.cursor()
        cur.execute("SET memory_limit = '16MB'")
        cur.execute("CREATE TENSOR A SHAPE (4096, 4096) TILE (256, 256) FILL ONES")
        assert cur.execute("SELECT COUNT(*) FROM A").fetchone()[0] == 256
    finally:
        con.close()
    assert not (tmp_path / "db.trdb.tmp").exists()  # removed with the database's last connection
