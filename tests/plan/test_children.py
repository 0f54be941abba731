"""One definition of a node's children (plan/logical.py's CHILDREN): every node class walked through it."""
from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from trdb.plan import logical as lp
from trdb.plan import physical

NODE_CLASSES = [cls for cls in typing.get_args(lp.Plan)]


def test_every_logical_node_class_is_a_plan_and_a_node():
    defined = {cls for _, cls in inspect.getmembers(lp, inspect.isclass)
               if dataclasses.is_dataclass(cls) and issubclass(cls, lp.Node)}
    assert defined == set(NODE_CLASSES)


@pytest.mark.parametrize("cls", NODE_CLASSES + [physical.PhysicalNode], ids=lambda cls: cls.__name__)
def test_children_are_exactly_the_fields_that_hold_plans(cls):
    """Each CHILDREN name is a field typed as a plan (or a tuple of them); no other field holds one."""
    names = {f.name for f in dataclasses.fields(cls)}
    assert set(cls.CHILDREN) <= names
    hints = typing.get_type_hints(cls, vars(lp) | vars(physical))
    for name in names:
        text = str(hints[name])
        holds_plan = any(word in text for word in ("TensorScan", "PhysicalNode")) and "TensorMeta" not in text
        assert holds_plan == (name in cls.CHILDREN), (cls.__name__, name, text)


def test_children_attributes_and_with_inputs_agree():
    """A node rebuilt over new inputs reads them back through children(); its other fields are unchanged."""
    from trdb.plan.types import Column, KeyType

    schema = (Column("i", KeyType()),)
    leaves = [lp.RowsScan(rows=[(n,)], schema=schema) for n in range(3)]
    union = lp.UnionAll(parts=tuple(leaves[:2]), schema=schema)
    assert lp.children(union) == tuple(leaves[:2]) and union.inputs == lp.children(union)
    rebuilt = lp.with_inputs(union, [leaves[2], leaves[0]])
    assert lp.children(rebuilt) == (leaves[2], leaves[0])
    assert lp.attributes(rebuilt) == lp.attributes(union)
    assert lp.with_inputs(union, list(leaves[:2])) is union  # no input changed: the node itself
    join = lp.Join(left=leaves[0], right=leaves[1], kind="inner", left_keys=(0,), right_keys=(0,), schema=schema * 2)
    assert lp.children(lp.with_inputs(join, [leaves[1], leaves[2]])) == (leaves[1], leaves[2])
    assert [name for name, _ in lp.attributes(join)] == [f.name for f in dataclasses.fields(join)
                                                          if f.name not in ("left", "right")]
