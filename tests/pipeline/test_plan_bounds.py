"""Plans of statements that read a CTE or view more than once: built once per subplan, bounded, cancellable."""
from __future__ import annotations

import inspect

import pytest

import trdb
from helpers.guarded_child import HANG_GUARD
from helpers.guarded_child import run_guarded as guarded
from trdb.optimizer.driver import check_plan_size, unfolded_operators
from trdb.parser import parse
from trdb.planner.binder import Binder
from trdb.planner.expression_binder import BindContext

pytestmark = pytest.mark.on_cpu  # children under RLIMIT_AS, where CUDA cannot start (conftest.py)



def tower(levels: int, first: str = "SELECT A.i, A.j, A.v FROM A") -> str:
    """A query whose CTE k joins CTE k-1 with itself (2.3 KB at 24 levels): as a tree, 2**levels scans of A."""
    ctes = [f"c0 AS ({first})"] + [
        f"c{k} AS (SELECT x.i, y.j, SUM(MATMUL(x.v, y.v)) * 0.25 AS v FROM c{k - 1} x JOIN c{k - 1} y "
        f"ON x.j = y.i GROUP BY x.i, y.j)" for k in range(1, levels + 1)]
    return "WITH " + ", ".join(ctes) + f" SELECT * FROM c{levels}"


OUTCOME = """
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    def outcome(text, params=()):
        try:
            rows = cur.execute(text, params).fetchall()
            print("ran", len(rows))
        except (trdb.ProgrammingError, trdb.OperationalError) as exc:
            print("refused", type(exc).__name__, str(exc).splitlines()[0])
"""  # the children's setup: A, and outcome() printing whether a statement ran or was refused


def run_guarded(body: str) -> str:
    return guarded(body, OUTCOME)


def _ran_or_refused(line: str, rows: int) -> None:
    assert line == f"ran {rows}" or line.startswith("refused"), line


def test_a_tower_of_24_self_joined_ctes_plans_and_runs_or_is_refused():
    out = run_guarded(f"""
        outcome({"EXPLAIN " + tower(24)!r})
        outcome({tower(24)!r})
    """).splitlines()
    assert out[0].startswith("ran") or out[0].startswith("refused"), out
    _ran_or_refused(out[1], 4)


def test_a_tower_of_views_and_one_over_an_array_constant_plan_or_are_refused():
    views = "".join(f"cur.execute({text!r})\n" for text in [
        "CREATE VIEW v0 AS SELECT A.i, A.j, A.v FROM A"] + [
        f"CREATE VIEW v{k} AS SELECT x.i, y.j, SUM(MATMUL(x.v, y.v)) * 0.25 AS v FROM v{k - 1} x JOIN v{k - 1} y "
        f"ON x.j = y.i GROUP BY x.i, y.j" for k in range(1, 25)])
    out = run_guarded(views + f"""
outcome("SELECT * FROM v24")
outcome({tower(24, "SELECT A.i, A.j, A.v * ? AS v FROM A")!r}, [np.ones((2, 2), np.float32)])
""").splitlines()
    _ran_or_refused(out[0], 4)
    _ran_or_refused(out[1], 4)


def test_grad_of_a_tower_is_refused_cleanly():
    loss = tower(24).replace("SELECT * FROM c24", "SELECT SUM(SUMSQ(c24.v)) AS v FROM c24")
    out = run_guarded(f"""
cur.execute({"CREATE VIEW loss AS " + loss!r})
outcome("SELECT * FROM GRAD(loss, A)")
""").splitlines()
    assert out[0].startswith("refused ProgrammingError") and "too large to differentiate" in out[0], out


def test_a_plan_read_twice_is_counted_per_reader_and_bounded(cur):
    cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
    catalog = cur.connection._session().catalog
    plan = Binder(catalog, BindContext("", ())).bind_query(parse(tower(30)).query).plan
    assert unfolded_operators(plan, 10_000) > 10_000  # 2**30 paths to A, counted in one walk of its ~150 nodes
    with pytest.raises(trdb.ProgrammingError, match="too large"):
        check_plan_size(plan, 10_000, "plan")


def test_close_from_another_thread_stops_a_statement_while_it_plans():
    out = run_guarded(inspect.getsource(tower) + f"""
import threading
outcome, planning = [], threading.Event()
def run():
    planning.set()
    try:
        for levels in range(20, 200):  # each a new statement, planned anew, until close() stops them
            cur.execute(tower(levels)).fetchall()
        outcome.append("finished")
    except trdb.Error as exc:
        outcome.append(type(exc).__name__)
worker = threading.Thread(target=run, daemon=True)
worker.start()
planning.wait()
cur.close()
worker.join({HANG_GUARD - 30})
print("alive" if worker.is_alive() else outcome[0])
""")
    assert out.splitlines()[-1] in ("QueryCancelled", "ProgrammingError"), out
