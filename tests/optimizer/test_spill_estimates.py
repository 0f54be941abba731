"""The cost model counts the bytes an operator will spill when its state exceeds its share of memory_limit."""
import trdb

# both inputs computed, so no band of a stored tensor's key applies (optimizer/banded_aggregate.py): the join's
# build side and the aggregate's groups do not fit, and both spill
MATMUL = ("SELECT X.i, Y.j, SUM(MATMUL(X.v, Y.v)) AS v FROM (SELECT A.i, A.j, RELU(A.v) AS v FROM A) AS X "
          "JOIN (SELECT B.i, B.j, RELU(B.v) AS v FROM B) AS Y ON X.j = Y.i GROUP BY X.i, Y.j")


def _explain(limit: str) -> list[str]:
    con = trdb.connect(workers=2)
    con.execute("CREATE TENSOR A (i, j) SHAPE (512, 512) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)")
    con.execute("CREATE TENSOR B (i, j) SHAPE (512, 512) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 2)")
    con.execute(f"SET memory_limit = '{limit}'")
    lines = [row[0] for row in con.execute("EXPLAIN " + MATMUL).fetchall()]
    con.close()
    return lines


def _line(lines: list[str], operator: str) -> str:
    return next(line for line in lines if operator in line)


def test_operators_whose_state_does_not_fit_show_their_expected_spill():
    lines = _explain("1MB")
    assert "spill=" in _line(lines, "HashAggregateExec")
    assert "spill=" in _line(lines, "HashJoinExec")
    assert "spill=" not in _line(lines, "TensorScanExec")


def test_nothing_is_expected_to_spill_when_the_budget_holds_it():
    assert not any("spill=" in line for line in _explain("4GB"))
