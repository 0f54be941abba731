"""numpy's einsum spec grammar (letters, ',', '->', implicit output): one parser for EINSUM per tile and in FROM."""
from __future__ import annotations

import string

LETTERS = frozenset(string.ascii_letters)


class SpecError(ValueError):
    """What is wrong with a spec's text; the caller names the spec and adds its own context."""


def parse(spec: str) -> tuple[list[str], str]:
    """The spec's input terms and output term (numpy's implicit output when there is no '->')."""
    text = "".join(spec.split())
    inputs_text, arrow, output = text.partition("->")
    bad = sorted((set(inputs_text) - LETTERS - {","}) | (set(output) - LETTERS))
    if "..." in text or bad:
        what = "'...' (ellipsis) is not supported" if "..." in text else \
            f"unexpected characters {''.join(bad)!r}"
        raise SpecError(f"{what}; use letters, ',' and '->'")
    inputs = inputs_text.split(",")
    if not arrow:
        # numpy's implicit mode: the letters that occur once, in alphabetical order.
        letters = inputs_text.replace(",", "")
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return inputs, output


def operand_count_problem(inputs: list[str], operands: int) -> str | None:
    """Why the spec does not fit that many operands, or None."""
    if len(inputs) == operands:
        return None
    return f"has {len(inputs)} operand terms but {operands} operands were given"


def output_problem(inputs: list[str], output: str) -> str | None:
    """Why the output term is wrong (a letter repeated, or one no input has), or None."""
    repeated = sorted({c for c in output if output.count(c) > 1})
    unknown = sorted(set(output) - set("".join(inputs)))
    if not (repeated or unknown):
        return None
    what = f"repeats {''.join(repeated)!r}" if repeated else f"uses {''.join(unknown)!r} that no operand has"
    return f"the output {what}"
