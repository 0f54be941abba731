"""Key ranges of an ordinary table (a bound on a key column's distinct values) follow its writes."""
from __future__ import annotations

import trdb
from trdb.optimizer.cardinality import _key_ranges
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column


def scan(table: str) -> lp.TableScan:
    return lp.TableScan(table, ("i",), (Column("i", KEY),))


def test_a_write_of_the_same_row_count_reads_the_ranges_again(tmp_path):
    con = trdb.connect(str(tmp_path / "ranges.trdb"))
    cur = con.cursor()
    db = con._session().db
    cur.execute("CREATE TABLE t AS SELECT range AS i FROM range(10)")
    assert _key_ranges(db, scan("t"), 10) == {"i": 10}
    cur.execute("UPDATE t SET i = i * 10")  # as many rows, another range
    assert _key_ranges(db, scan("t"), 10) == {"i": 91}
    con.close()


def test_two_databases_do_not_share_ranges(tmp_path):
    first, second = trdb.connect(str(tmp_path / "a.trdb")), trdb.connect(str(tmp_path / "b.trdb"))
    first.execute("CREATE TABLE t AS SELECT range AS i FROM range(5)")
    second.execute("CREATE TABLE t AS SELECT range * 3 AS i FROM range(5)")
    assert _key_ranges(first._session().db, scan("t"), 5) == {"i": 5}
    assert _key_ranges(second._session().db, scan("t"), 5) == {"i": 13}
    first.close(), second.close()
