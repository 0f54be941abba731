"""Statements the fuzzer (tests/fuzz/) found raising raw Python exceptions or InternalErrors: now trdb errors or results."""
from __future__ import annotations

import numpy as np
import pytest

import trdb

G = "CREATE TENSOR G SHAPE (64, 48) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1)"


@pytest.fixture
def gcur(cur):
    cur.execute(G)
    return cur


def dense(cur, name: str = "G") -> np.ndarray:
    cur.execute(f"SELECT * FROM {name}")
    return cur.fetch_tensor()


@pytest.mark.parametrize("text", ["\ud800", "SELECT * FROM G WHERE \ud800", "SELECT 1 AS x\udcff"])
def test_a_lone_surrogate_is_not_utf8_text(gcur, text):
    with pytest.raises(trdb.ProgrammingError, match="not valid UTF-8"):
        gcur.execute(text)
    gcur.execute("SELECT 1")


@pytest.mark.parametrize("text", ["\ufeff", "\u200b\u200b ", "\ufeff;\u200b", "\u180e -- nothing"])
def test_invisible_characters_alone_are_an_empty_statement(cur, text):
    with pytest.raises(trdb.ProgrammingError, match="empty statement"):
        cur.execute(text)


def test_a_bom_before_a_statement_is_space(cur):
    cur.execute("\ufeffSELECT 1 AS x")
    assert cur.fetchall() == [(1,)]
