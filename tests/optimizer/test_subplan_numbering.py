"""The numbering of shared subplans: equal subplans equal numbers, kept across statements and writes
for plans over stored data, never keeping a statement's own data (its tuples, a parameter's array) alive."""
from __future__ import annotations

import gc
import weakref

import numpy as np

from trdb.optimizer.common_subplans import Numbering as _Numbering
from trdb.pipeline.shared_work import CarriedWork
from trdb.plan import expressions as bx
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, ScalarType

SCHEMA = (Column("i", KEY),)


def table(name: str = "t") -> lp.TableScan:
    return lp.TableScan(name, ("i",), SCHEMA)


def above(plan, value) -> lp.Filter:
    """A filter on the key against a constant `value`."""
    return lp.Filter(plan, bx.Compare("=", bx.ColumnIndex(0, KEY), bx.Const(value, ScalarType(int))))


def test_equal_subplans_get_one_number_and_keep_it_in_later_statements():
    numbering = _Numbering()
    first, second = above(table(), 1), above(table(), 1)
    assert first is not second and numbering.number(first) == numbering.number(second)
    assert numbering.number(above(table(), 2)) != numbering.number(first)
    numbering.next_statement()
    assert numbering.number(second) == numbering.number(above(table(), 1))


def test_a_subplan_over_computed_tuples_is_forgotten_with_its_statement():
    numbering = _Numbering()
    rows = lp.RowsScan([(1,)], SCHEMA)
    plan = above(rows, 1)
    number = numbering.number(plan)
    assert number is not None and numbering.number(plan) == number  # shared within the statement
    gone = weakref.ref(rows)
    numbering.next_statement()
    del rows, plan
    gc.collect()
    assert gone() is None
    # tuples computed later are other tuples, even where they reuse the memory (and id) of earlier ones
    assert numbering.number(above(lp.RowsScan([(1,)], SCHEMA), 1)) != number


def test_a_parameter_array_is_not_kept_past_its_statement():
    numbering = _Numbering()
    array = np.ones(8)
    plan = above(table(), array)
    number = numbering.number(plan)  # unhashable: equal to itself only (one plan read twice is computed once)
    assert number is not None and numbering.number(plan) == number
    assert numbering.number(above(table(), array)) != number
    gone = weakref.ref(array)
    numbering.next_statement()
    del array, plan
    gc.collect()
    assert gone() is None


def test_a_write_drops_the_carried_tuples_but_keeps_the_numbering():
    carried = CarriedWork(lambda: 1 << 30)
    numbering = carried.numbering_for(("version", 1))
    plan = above(table(), 1)
    number = numbering.number(plan)
    carried.tuples = {number: lp.RowsScan([(1,)], SCHEMA)}
    assert carried.numbering_for(("version", 1)).number(plan) == number and carried.tuples
    after_write = carried.numbering_for(("version", 2))
    assert after_write is numbering and after_write.number(plan) == number
    assert carried.tuples == {}
