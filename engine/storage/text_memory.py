"""What a statement's text costs in memory while trdb and DuckDB parse it, reserved from memory_limit up front."""
from __future__ import annotations

import re

from trdb.errors import OperationalError
from trdb.storage.memory import MemoryManager, Reservation

# Peak bytes per character of statement text, measured: inside a quoted literal, identifier or comment
# about 15 (the text, trdb's token and value, DuckDB's copy); elsewhere up to ~1.6 KB, a token every one
# or two characters (`VALUES (1),(1),...`: ~700 in trdb's parse tree, ~900-1400 in DuckDB's, which parses
# plain SQL to check it and again to run it, while trdb's statement is held)
QUOTED_COST = 32
TOKEN_COST = 2048
FREE_TEXT = 64 << 10  # characters: a shorter text is never refused (its cost is part of a statement's fixed cost)

# quoted texts and comments, as unrolled possessive loops (no regex memory per character)
_QUOTED = re.compile(r"""'[^']*(?:''[^']*)*+'?|"[^"]*(?:""[^"]*)*+"?|--[^\n]*|/\*[^*]*(?:\*+[^*/][^*]*)*+\**/?""")


def text_cost(text: str) -> int:
    """About the most memory parsing and running `text` takes before its data moves (an upper estimate)."""
    quoted = sum(match.end() - match.start() for match in _QUOTED.finditer(text))
    return quoted * QUOTED_COST + (len(text) - quoted) * TOKEN_COST


def reserve_text(memory: MemoryManager, text: str) -> Reservation:
    """A reservation of what `text` costs to parse, to release when the statement ends; OperationalError
    when memory_limit cannot hold it (checked before any parsing, which would otherwise fail anywhere)."""
    reservation = memory.reservation("statement text")
    if len(text) <= FREE_TEXT:
        return reservation
    cost = text_cost(text)
    if not reservation.try_grow(cost):
        raise OperationalError(
            f"statement text of {_size(len(text))} needs about {_size(cost)} of memory to parse, more than "
            f"memory_limit ({_size(memory.limit)}) leaves free",
            hint="pass large values as parameters (?), load data from files (COPY ... FROM, CREATE TENSOR ... "
                 "FROM 'file.npy'), split the statement, or raise memory_limit")
    return reservation


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"
