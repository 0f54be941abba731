"""Plain SQL passed through to DuckDB: it may read trdb's `_trdb` schema, never write it or the settings trdb owns."""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Sequence

import duckdb

from trdb.errors import DataError, ProgrammingError
from trdb.parser import nests_deeper_than
from trdb.storage.catalog_store import SCHEMA
from trdb.storage.database import Database

Kind = duckdb.StatementType

# DuckDB settings that trdb sets and relies on; those with a trdb setting of their own point to it.
OWNED_SETTINGS = {
    "memory_limit": "SET memory_limit = '4GB' sets trdb's memory limit, which bounds DuckDB's too",
    "max_memory": "SET memory_limit = '4GB' sets trdb's memory limit, which bounds DuckDB's too",
    "threads": "SET workers = 4 sets how many threads trdb runs",
    "worker_threads": "SET workers = 4 sets how many threads trdb runs",
    "force_compression": "trdb stores its tiles uncompressed for fast look-ups",
    "temp_directory": "SET temp_directory = '/path' sets where trdb and DuckDB spill",
    "max_temp_directory_size": "trdb bounds what DuckDB spills",
    "default_order": "trdb reads its tiles in ascending key order",
}
# DuckDB's Arrow output is how trdb reads tiles and catalog rows back: it stays in the form trdb reads.
OWNED_SETTINGS.update(dict.fromkeys(
    ("arrow_output_version", "arrow_large_buffer_size", "produce_arrow_string_view", "arrow_lossless_conversion",
     "arrow_output_list_view"), "trdb reads its tiles through DuckDB's Arrow output, in the form it has by default"))
_DEFAULT_SCHEMA_SETTINGS = ("schema", "search_path")
_REFUSED = {Kind.ATTACH: "attach a database", Kind.DETACH: "detach a database",
            Kind.COPY_DATABASE: "copy a database"}
# trdb keeps the state of its transactions (the catalog mirror, an aborted flag, the write lock): one that
# DuckDB began or ended behind its back would commit or keep what trdb rolls back.
_TRANSACTION_HINT = "BEGIN, COMMIT and ROLLBACK are trdb's own statements: write them alone, without options"
# Statement kinds that only read, unless their text holds one of _WRITE_WORDS (a data-modifying CTE).
_READS = {Kind.SELECT, Kind.EXPORT, Kind.EXECUTE, Kind.LOAD, Kind.EXTENSION,
          Kind.VARIABLE_SET}
_READ_PRAGMAS = {"table_info", "storage_info", "show", "database_size", "metadata_info"}

_TRDB = re.compile(rf"(?<![\w$]){SCHEMA}(?![\w$])", re.I)
_WRITE_WORDS = re.compile(r"(?<![\w$])(INSERT|UPDATE|DELETE|MERGE|TRUNCATE|COPY|CREATE|DROP|ALTER|ATTACH|DETACH|"
                          r"IMPORT|VACUUM|NEXTVAL|SETVAL|DBGEN|DSDGEN)(?![\w$])", re.I)
_SEQUENCE_CALL = re.compile(r"(?<![\w$])(NEXTVAL|SETVAL)(?![\w$])", re.I)
_LITERAL_ARGUMENT = re.compile(r"\s*\(\s*'[^']*'\s*[,)]")
_LEADING_COMMENTS = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)
_NAME = r'(?:"[^"]*(?:""[^"]*)*+"|[A-Za-z_][\w$]*)'  # unrolled, possessive: no regex memory per character
_SETTING = re.compile(rf"(?P<verb>SET|RESET|PRAGMA)\s+(?:(?:GLOBAL|SESSION|LOCAL)\s+)?"
                      rf"(?:(?P<variable>VARIABLE)\s+)?(?P<name>{_NAME})", re.I)
_LITERAL_VALUE = re.compile(r"\s*(?:=|TO)\s*'[^']*'\s*;?\s*$", re.I)
_COPY_TO = re.compile(rf"COPY\s*\(|COPY\s+{_NAME}(?:\s*\.\s*{_NAME}){{0,2}}\s*(?:\([^()]*\))?\s*TO\b", re.I)
_INNER = {Kind.EXPLAIN: re.compile(r"EXPLAIN\s+(?:ANALY[SZ]E\s+)?|EXPLAIN\s*\([^()]*\)\s*", re.I),
          Kind.PREPARE: re.compile(rf"PREPARE\s+{_NAME}\s*(?:\([^()]*\))?\s*AS\s+", re.I)}
# A write whose target the text names plainly: allowed to read _trdb when the target is elsewhere.
_TARGET = re.compile(rf"(?:INSERT\s+(?:OR\s+(?:REPLACE|IGNORE)\s+)?INTO|CREATE\s+(?:OR\s+REPLACE\s+)?"
                     rf"(?:TEMP(?:ORARY)?\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?)\s+"
                     rf"(?P<target>{_NAME}(?:\s*\.\s*{_NAME}){{0,2}})(?=\s*\(|\s+[A-Za-z])", re.I)
_HINT = (f"the {SCHEMA} schema is written only by trdb: SELECT from it freely, and change tensors with trql "
         "(CREATE TENSOR, INSERT INTO, UPDATE, DELETE FROM, DROP TENSOR)")


def run_plain_sql(db: Database, text: str, params: Sequence[Any] = ()) -> tuple[list[tuple], Any, int]:
    """Run one plain SQL statement in DuckDB if check_plain_sql allows it: its rows, cursor description and
    row count."""
    check_plain_sql(text)
    check_one_statement(text)
    return db.execute_with_description(text, params)


_CACHED_TEXT = 16 << 10  # characters: a long text (literal data) is rarely run again, and kept it would hold memory


def _cached_when_short(check: Callable[[str], None]) -> Callable[[str], None]:
    """A check of a text, remembered for short texts: one allowed once is allowed again (no second parse)."""
    cached = functools.lru_cache(maxsize=512)(check)

    @functools.wraps(check)
    def checked(text: str) -> None:
        return cached(text) if len(text) <= _CACHED_TEXT else check(text)
    return checked


# DuckDB refuses expressions nested deeper (its max_expression_depth), but its parser takes time and memory
# that grow as the square of the depth to report a syntax error deep inside: 5 s and 2.4 GB at 5,000
MAX_PLAIN_SQL_NESTING = 1000


@_cached_when_short
def check_plain_sql(text: str) -> None:
    """Raise ProgrammingError, before DuckDB runs any of it, unless every statement of `text` may run."""
    if nests_deeper_than(text, MAX_PLAIN_SQL_NESTING):
        raise ProgrammingError(f"Parser Error: plain SQL nests parentheses more than {MAX_PLAIN_SQL_NESTING} "
                               "deep", hint="store intermediate results in tables (CREATE TABLE ... AS) and "
                                            "nest less")
    for kind, query in _statements(text):
        _check_statement(kind, _LEADING_COMMENTS.sub("", query, count=1))


@_cached_when_short
def check_one_statement(text: str) -> None:
    """trdb runs plain SQL one statement at a time: a text it took for one statement that DuckDB reads as
    several (their lexical rules differ somewhere) is refused rather than run as DuckDB splits it."""
    found = len(_statements(text))
    if found > 1:
        raise ProgrammingError(f"plain SQL: DuckDB reads this text as {found} statements where trdb read one "
                               "statement", hint="end each statement with ';' outside strings and comments")


def _statements(text: str) -> tuple[tuple[Kind, str], ...]:
    try:
        return tuple((s.type, s.query) for s in duckdb.extract_statements(text))
    except (duckdb.Error, UnicodeDecodeError):  # the latter: DuckDB's message quoted non-UTF-8 bytes (X'é')
        return ()  # DuckDB cannot parse it either, so it runs none of it and its own error says why


def _check_statement(kind: Kind, body: str) -> None:
    _check_sequences(body)
    if kind == Kind.TRANSACTION:
        raise ProgrammingError(f"plain SQL cannot run {_first_words(body, 3)}: trdb begins and ends its "
                               "transactions itself", hint=_TRANSACTION_HINT)
    if kind in _REFUSED:
        raise ProgrammingError(f"plain SQL cannot {_REFUSED[kind]}: trdb owns the databases of its connection",
                               hint="open another database with trdb.connect(path)")
    if kind == Kind.SET:
        return _check_setting(body)
    if kind == Kind.PRAGMA:
        return _check_pragma(body)
    if kind in _INNER:
        return _check_inner(kind, body)
    if not _TRDB.search(body):
        return None
    if kind in _READS:
        return _check_read(body)
    copy_to = _COPY_TO.match(body) if kind == Kind.COPY else None
    if copy_to:
        return _check_read(body, copy_to.end())
    if not _writes_elsewhere(body):
        raise _catalog_write(body)
    return None


def _check_sequences(body: str) -> None:
    """nextval/setval take a sequence name that may be computed: only a plain literal can be checked."""
    for call in _SEQUENCE_CALL.finditer(body):
        if not _LITERAL_ARGUMENT.match(body, call.end()):
            raise ProgrammingError(f"plain SQL may call {call.group(1).lower()} only with the sequence's name "
                                   "as a quoted literal", hint=f"{call.group(1).lower()}('my_sequence')")


def _check_read(body: str, start: int = 0) -> None:
    word = _WRITE_WORDS.search(body, start)
    if word:
        raise ProgrammingError(f"plain SQL cannot change trdb's catalog: this statement names the {SCHEMA} "
                               f"schema and {word.group(1).upper()}s", hint=_HINT)


def _check_inner(kind: Kind, body: str) -> None:
    """EXPLAIN ANALYZE runs its statement and PREPARE keeps one for EXECUTE: check that statement."""
    prefix = _INNER[kind].match(body)
    if prefix is None:
        if _TRDB.search(body) or _WRITE_WORDS.search(body):
            raise ProgrammingError(f"plain SQL: cannot tell which statement this {kind.name} holds",
                                   hint=f"write {kind.name} and the statement it holds without comments between")
        return
    inner = body[prefix.end():]
    try:
        statements = duckdb.extract_statements(inner)
    except duckdb.Error:
        statements = []
    if not statements and _TRDB.search(inner):
        raise _catalog_write(body)
    for statement in statements:
        _check_statement(statement.type, _LEADING_COMMENTS.sub("", statement.query, count=1))


def _writes_elsewhere(body: str) -> bool:
    """An INSERT INTO or CREATE TABLE whose target is outside _trdb and that writes nothing else."""
    found = _TARGET.match(body)
    if found is None or _TRDB.search(found.group("target")):
        return False
    return _WRITE_WORDS.search(body, found.end()) is None


def _check_setting(body: str) -> None:
    """SET, RESET, USE and PRAGMA name = value."""
    if re.match(r"USE\b", body, re.I):
        if _TRDB.search(body):
            raise ProgrammingError(f"plain SQL cannot USE trdb's {SCHEMA} schema",
                                   hint=f"name its tables in full: SELECT * FROM {SCHEMA}.tensors")
        return
    found = _SETTING.match(body)
    if found is None:
        raise ProgrammingError("plain SQL: cannot tell which setting this statement sets",
                               hint="SET name = value, with no comments between SET and the name")
    if found.group("variable"):
        return
    name = _unquote(found.group("name")).lower()
    if name in OWNED_SETTINGS:
        raise ProgrammingError(f"plain SQL cannot {found.group('verb').upper()} the DuckDB setting {name}: "
                               "trdb owns it", hint=OWNED_SETTINGS[name])
    if name in _DEFAULT_SCHEMA_SETTINGS:
        _check_default_schema(found, body)


def _check_default_schema(found: re.Match, body: str) -> None:
    """The default schema decides where unqualified names go: never _trdb, never a computed value."""
    literal = found.group("verb").upper() == "RESET" or _LITERAL_VALUE.match(body, found.end())
    if _TRDB.search(body) or not literal:
        raise ProgrammingError(f"plain SQL cannot set {found.group('name')} to trdb's {SCHEMA} schema or to a "
                               "computed value", hint=f"SET {found.group('name')} = 'main'")


def _check_pragma(body: str) -> None:
    found = re.match(r"PRAGMA\s+(\w+)", body, re.I)
    if found is None:  # IMPORT DATABASE and COPY FROM DATABASE are PRAGMAs inside DuckDB
        raise ProgrammingError(f"plain SQL cannot run {_first_words(body)}: it would rewrite trdb's catalog",
                               hint="load data with CREATE TABLE t AS SELECT * FROM read_csv('file.csv')")
    name = found.group(1).lower()
    if name in OWNED_SETTINGS:
        raise ProgrammingError(f"plain SQL cannot PRAGMA the DuckDB setting {name}: trdb owns it",
                               hint=OWNED_SETTINGS[name])
    if name in ("import_database", "copy_database"):
        raise ProgrammingError(f"plain SQL cannot run PRAGMA {name}: it would rewrite trdb's catalog")
    if _TRDB.search(body) and name not in _READ_PRAGMAS:
        raise _catalog_write(body)


def _catalog_write(body: str) -> ProgrammingError:
    return ProgrammingError(f"plain SQL cannot change trdb's catalog: this {_first_words(body)} statement "
                            f"names the {SCHEMA} schema", hint=_HINT)


def _first_words(body: str, count: int = 2) -> str:
    return " ".join(body.split()[:count]).upper()


def _unquote(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


def check_plain_parameters(params: Sequence[Any], memory_limit: int) -> None:
    """DuckDB turns an array parameter into a LIST value element by element (many times its bytes):
    one past a sixteenth of memory_limit is refused before DuckDB starts."""
    for position, value in enumerate(params.values() if isinstance(params, dict) else params, 1):
        size = getattr(value, "nbytes", 0)
        if isinstance(size, int) and size > memory_limit // 16:
            raise DataError(f"parameter {position} holds {size:,} bytes, too many for a plain SQL value "
                            f"(at most memory_limit / 16 = {memory_limit // 16:,})",
                            hint="store it as a tensor (CREATE TENSOR ... FROM ?) or pass it as a table")
