"""Tab completion for the shell: keywords, functions, tensor/view/table names, their columns, dot commands."""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

import trdb.parser
from trdb.api.shell.commands import COMMAND_NAMES
from trdb.api.shell.formatting import MODES
from trdb.api.shell.registry import relation_names
from trdb.catalog.functions import function_names
from trdb.storage.sql_text import quote_identifier

if TYPE_CHECKING:
    from trdb.api.shell.runner import Runner

# Words the grammar reads as names rather than fixed tokens, and plain SQL the shell passes to DuckDB.
EXTRA_WORDS = """TABLE TABLES SUM AVG MIN MAX COUNT ZEROS ONES CONSTANT IDENTITY RANDOM_NORMAL RANDOM_UNIFORM
    FLOAT32 FLOAT64 FLOAT16 INT32 INT64 BOOL""".split()
IDENT = r"[^\W\d]\w*"
WORD_BEFORE = re.compile(rf"({IDENT})?$")
QUALIFIED = re.compile(rf"({IDENT})\.(\w*)$")
ON_OFF = ("on", "off")
DOT_ARGUMENTS = {".mode": MODES, ".timer": ON_OFF, ".explain": ON_OFF, ".headers": ON_OFF, ".echo": ON_OFF,
                 ".bail": ON_OFF, ".plot": ("spy", "loss")}


@functools.cache
def keywords() -> tuple[str, ...]:
    """The grammar's keywords (its quoted words) and a few more."""
    grammar = Path(trdb.parser.__file__).with_name("trql.lark").read_text()
    found = set(re.findall(r'"([A-Za-z_]+)"i', grammar)) | set(EXTRA_WORDS)
    return tuple(sorted(word.upper() for word in found))


def _in_string(text: str) -> bool:
    """Whether the cursor is inside a '...' literal or a -- comment (no completion there)."""
    line = text.rsplit("\n", 1)[-1]
    return text.count("'") % 2 == 1 or any("--" in outside for outside in line.split("'")[0::2])


def _matching(words: Iterable[str], prefix: str, meta: str) -> Iterator[Completion]:
    lower = prefix.lower()
    as_typed = prefix.islower() and meta in ("keyword", "function")
    for word in words:
        if word.lower().startswith(lower) and word.lower() != lower:
            text = word.lower() if as_typed else word
            yield Completion(text, start_position=-len(prefix), display_meta=meta)


class SqlCompleter(Completer):
    """Completes from the catalog of the runner's connection, refreshed after each statement."""

    def __init__(self, runner: "Runner"):
        self.runner = runner
        self._generation = -1
        self._names: list[tuple[str, str]] = []
        self._columns: dict[str, list[str]] = {}

    def names(self) -> list[tuple[str, str]]:
        if self._generation != self.runner.generation:
            self._generation, self._columns = self.runner.generation, {}
            try:
                self._names = relation_names(self.runner.con)
            except Exception:  # noqa: BLE001 - completion must never break the prompt
                pass
        return self._names

    def columns(self, relation: str) -> list[str]:
        key = relation.lower()
        if key not in self._columns:
            try:
                rows = self.runner.con.execute(f"DESCRIBE {quote_identifier(relation)}").fetchall()
                self._columns[key] = [str(row[0]) for row in rows]
            except Exception:  # noqa: BLE001 - completion must never break the prompt
                self._columns[key] = []
        return self._columns[key]

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        text = document.text_before_cursor
        if text.lstrip().startswith(".") and "\n" not in text.strip():
            yield from self._dot_command(text.lstrip(), complete_event)
            return
        if _in_string(text):
            return
        qualified = QUALIFIED.search(text)
        if qualified:
            relation = self._resolve(qualified.group(1), document.text)
            yield from _matching(self.columns(relation) if relation else [], qualified.group(2), "column")
            return
        prefix = WORD_BEFORE.search(text).group(1) or ""
        if not prefix and not complete_event.completion_requested:
            return
        for name, kind in self.names():
            yield from _matching([name], prefix, kind)
        yield from _matching(function_names(), prefix, "function")
        yield from _matching(keywords(), prefix, "keyword")

    def _resolve(self, word: str, statement: str) -> str | None:
        """The relation a qualifier names: itself, or the relation it is an alias of in the statement."""
        known = {name.lower(): name for name, _ in self.names()}
        if word.lower() in known:
            return known[word.lower()]
        for match in re.finditer(rf"({IDENT})\s+(?:AS\s+)?{re.escape(word)}\b", statement, re.I):
            if match.group(1).lower() in known:
                return known[match.group(1).lower()]
        return None

    def _dot_command(self, text: str, event: CompleteEvent) -> Iterator[Completion]:
        command, _, argument = text.partition(" ")
        if not _:
            yield from _matching(COMMAND_NAMES, command, "command")
            return
        argument = argument.lstrip()
        if command in (".read", ".output", ".once", ".open", ".import"):
            yield from PathCompleter(expanduser=True).get_completions(Document(argument), event)
        elif command in (".schema", ".spy", ".dump"):
            yield from _matching([name for name, _kind in self.names()], argument, "name")
        elif command in DOT_ARGUMENTS:
            yield from _matching(DOT_ARGUMENTS[command], argument, "option")
