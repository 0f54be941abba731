"""numpy's einsum spec grammar: letters, ',', '->', '...', spaces, implicit output, size-1 broadcasting.

`parse` checks the text alone; `resolve` fits it to operand shapes and returns a plain spec (letters,
',' and '->' only) that means the same: each ellipsis axis gets a letter the spec does not use
(right-aligned across operands, as numpy broadcasts them), and a letter that is 1 in one operand but
larger elsewhere gets a letter of its own there (size 1, summed away), which is numpy's broadcasting
of that axis. Everything after `resolve` (kernels, the relational decomposition, gradients) sees
plain specs only.
"""
from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from typing import Optional, Sequence

LETTERS = frozenset(string.ascii_letters)
ELLIPSIS = "."  # how a parsed term marks its ellipsis


class SpecError(ValueError):
    """What is wrong with a spec's text; the caller names the spec and adds its own context."""


@dataclass(frozen=True)
class Resolved:
    """A spec fitted to its operands' shapes: plain terms, plain output, and every letter's size."""

    inputs: tuple[str, ...]
    output: str
    sizes: tuple[tuple[str, int], ...]

    @property
    def spec(self) -> str:
        return ",".join(self.inputs) + "->" + self.output

    @property
    def size(self) -> dict:
        return dict(self.sizes)


@functools.lru_cache(maxsize=1024)
def parse_text(spec: str) -> tuple[tuple[str, ...], Optional[str]]:
    """The input terms and the explicit output term (None: implicit), an ellipsis marked by '.'."""
    text = "".join(spec.split())
    if text.count("->") > 1:
        raise SpecError("'->' appears more than once")
    inputs_text, arrow, output_text = text.partition("->")
    inputs = tuple(_term(t, f"operand {n}") for n, t in enumerate(inputs_text.split(","), start=1))
    output = _term(output_text, "the output") if arrow else None
    if output is not None:
        repeated = sorted({c for c in output if c != ELLIPSIS and output.count(c) > 1})
        unknown = sorted(set(output) - set("".join(inputs)) - {ELLIPSIS})
        if repeated:
            raise SpecError(f"the output repeats {''.join(repeated)!r}")
        if unknown:
            raise SpecError(f"the output uses {''.join(unknown)!r} that no operand has")
    return inputs, output


def _term(text: str, where: str) -> str:
    term = text.replace("...", ELLIPSIS)
    bad = sorted(set(term) - LETTERS - {ELLIPSIS})
    if bad:
        raise SpecError(f"unexpected character {bad[0]!r} in {where}; use letters, ',', '->' and '...'")
    if term.count(ELLIPSIS) > 1 or "." in text.replace("...", ""):
        raise SpecError(f"{where} has a '.' that is not one '...' (at most one ellipsis per term)")
    return term


def parse(spec: str) -> tuple[list[str], str]:
    """The input terms and output term of a spec without '...' (numpy's implicit output without '->')."""
    inputs, output = parse_text(spec)
    if output is None:
        output = _implicit(inputs, "")
    return list(inputs), output


def _implicit(inputs: Sequence[str], ellipsis_letters: str) -> str:
    # numpy's implicit mode: the ellipsis axes, then the letters that occur once, in ASCII order
    letters = "".join(inputs).replace(ELLIPSIS, "")
    return ellipsis_letters + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))


def operand_count_problem(inputs: Sequence[str], operands: int) -> str | None:
    """Why the spec does not fit that many operands, or None."""
    if len(inputs) == operands:
        return None
    return f"has {len(inputs)} operand terms but {operands} operands were given"


def resolve(spec: str, shapes: Sequence[Sequence[int]]) -> Resolved:
    """The spec as a plain spec for operands of these shapes; SpecError says why numpy would refuse it."""
    return _resolve(spec, tuple(tuple(int(n) for n in s) for s in shapes))


def resolve_for_arrays(spec: str, shapes: tuple[tuple[int, ...], ...]) -> Resolved:
    """`resolve` for the shapes of arrays (tuples of Python ints already): asked at every kernel call."""
    return _resolve(spec, shapes)


@functools.lru_cache(maxsize=4096)
def _resolve(spec: str, shapes: tuple) -> Resolved:
    inputs, output = parse_text(spec)
    problem = operand_count_problem(inputs, len(shapes))
    if problem:
        raise SpecError(f"it {problem}")
    ellipsis_ranks = [_ellipsis_rank(term, shape, n) for n, (term, shape) in enumerate(zip(inputs, shapes), 1)]
    fresh = iter(sorted(LETTERS - set("".join(inputs))))
    ellipsis = _take(fresh, max(ellipsis_ranks, default=0))
    terms = [term.replace(ELLIPSIS, ellipsis[len(ellipsis) - k:]) for term, k in zip(inputs, ellipsis_ranks)]
    if output is None:
        output = _implicit(inputs, ellipsis)
    elif ELLIPSIS in output:
        output = output.replace(ELLIPSIS, ellipsis)
    elif ellipsis:
        raise SpecError(f"the operands have {len(ellipsis)} axes under '...' but the output has no '...' "
                        "to put them in")
    sizes = _sizes(terms, shapes)
    terms = _broadcast(terms, shapes, sizes, fresh)
    for term, shape in zip(terms, shapes):
        sizes.update(zip(term, shape))
    return Resolved(tuple(terms), output, tuple(sorted(sizes.items())))


def _ellipsis_rank(term: str, shape: tuple, position: int) -> int:
    letters = len(term.replace(ELLIPSIS, ""))
    if ELLIPSIS not in term and letters != len(shape):
        raise SpecError(f"operand {position} term {term!r} has {letters} letters but the operand has "
                        f"{len(shape)} dimensions" + (" (use '...' for the others)" if letters < len(shape) else ""))
    if letters > len(shape):
        raise SpecError(f"operand {position} term {term.replace(ELLIPSIS, '...')!r} has {letters} letters but "
                        f"the operand has only {len(shape)} dimensions")
    return len(shape) - letters


def _take(fresh, count: int) -> str:
    letters = "".join(c for _, c in zip(range(count), fresh))
    if len(letters) < count:
        raise SpecError("the spec needs more than 52 distinct indices once '...' is expanded")
    return letters


def _sizes(terms: list[str], shapes: tuple) -> dict:
    """Each letter's full size: equal within an operand, equal or 1 across operands."""
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for position, (term, shape) in enumerate(zip(terms, shapes), start=1):
        own: dict[str, int] = {}
        for letter, n in zip(term, shape):
            if own.setdefault(letter, n) != n:
                raise SpecError(f"letter {letter!r} is {own[letter]} and {n} within operand {position} "
                                "(a repeated letter takes a diagonal: its axes must be equal)")
            if letter not in sizes or sizes[letter] == 1:
                sizes[letter], where[letter] = n, position
            elif n not in (1, sizes[letter]):
                raise SpecError(f"letter {letter!r} is {sizes[letter]} in operand {where[letter]} and {n} in "
                                f"operand {position} (only a size of 1 broadcasts)")
    return sizes


def _broadcast(terms: list[str], shapes: tuple, sizes: dict, fresh) -> list[str]:
    """Each letter that is 1 in an operand but larger elsewhere renamed there to a letter of its own."""
    result = []
    for term, shape in zip(terms, shapes):
        renames = {c: None for c, n in zip(term, shape) if n == 1 and sizes[c] != 1}
        for c in renames:
            renames[c] = _take(fresh, 1)
        result.append("".join(renames.get(c) or c for c in term))
    return result
