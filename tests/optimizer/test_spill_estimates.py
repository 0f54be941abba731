"""The cost model counts the bytes an operator will spill when its state exceeds its share of memory_limit."""
import trdb

MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"


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
