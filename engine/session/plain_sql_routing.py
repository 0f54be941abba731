"""Which statements are plain SQL for DuckDB, and how many `?` parameters a statement has."""
from __future__ import annotations

import re
from typing import Optional

from trdb import errors
from trdb.catalog.catalog import Catalog
from trdb.catalog.names import fold
from trdb.config.settings import SETTINGS
from trdb.parser import ast

_TRQL_ONLY = re.compile(r"^\s*(CREATE\s+(OR\s+REPLACE\s+)?TENSOR|(DROP|ALTER)\s+TENSOR|MINIMIZE|SHOW\s+TENSORS)\b",
                        re.I)


def count_params(statement) -> int:
    return max((n.index + 1 for n in ast.walk(statement) if isinstance(n, ast.Param)), default=0)


def param_names(statement) -> tuple[str, ...]:
    """The `$name` parameters of a statement in index order (empty for `?` and `$1` placeholders)."""
    named = {n.index: n.name for n in ast.walk(statement) if isinstance(n, ast.Param) and n.name}
    return tuple(named[i] for i in sorted(named))


def bind_named(statement, values) -> tuple:
    """A mapping of `$name` values as the positional tuple the statement's placeholders index."""
    names = param_names(statement)
    given = {str(k).lower(): v for k, v in values.items()}
    missing = [n for n in names if n not in given]
    extra = sorted(set(given) - set(names))
    if missing or extra or (not names and given):
        raise errors.ProgrammingError(
            "named parameters do not match the statement: " + "; ".join(
                part for part in (f"missing ${', $'.join(missing)}" if missing else "",
                                  f"unused {', '.join(extra)}" if extra else "") if part),
            hint="a mapping of parameters binds $name placeholders; a sequence binds ? and $1")
    return tuple(given[n] for n in names)


Relations = tuple[frozenset[str], bool]  # names a query reads, and whether it has trql-only FROM items


def query_relations(statement) -> Optional[Relations]:
    """What routing needs of a query, CREATE VIEW or EXPLAIN of one: the relation names its query reads
    (CTE names excluded) and whether it uses trql-only FROM items; None for other statements.

    The session keeps this with the statement in its parse cache: walking the tree costs as much
    as running a small plan, so a repeated statement does not walk it again."""
    while isinstance(statement, ast.Explain):
        statement = statement.statement
    if isinstance(statement, (ast.QueryStatement, ast.CreateView, ast.DescribeQuery, ast.SummarizeQuery)):
        return _walk_relations(statement.query)
    return None


def _walk_relations(node) -> Relations:
    names, ctes, special = set(), set(), False
    for item in ast.walk(node):
        if isinstance(item, ast.TableRef):
            names.add(fold(item.name))
        elif isinstance(item, ast.Cte):
            ctes.add(fold(item.name))
        elif isinstance(item, (ast.EinsumRef, ast.GradRef, ast.RetileRef)):
            special = True
    return frozenset(names - ctes), special


def _reads_only_ordinary_tables(relations: Relations, catalog: Catalog) -> bool:
    names, special = relations
    return not special and all(catalog.ordinary_table(n) is not None and not catalog.tensor(n)
                               and not catalog.view(n) for n in names)


def _is_ordinary(name: str, catalog: Catalog) -> bool:
    return catalog.ordinary_table(name) is not None and catalog.tensor(name) is None and catalog.view(name) is None


def is_plain_sql(statement, catalog: Catalog, relations: Optional[Relations] = None) -> bool:
    """True when DuckDB should run the statement as written (it touches only ordinary tables).
    `relations`: query_relations(statement), when the caller has kept it."""
    if isinstance(statement, (ast.QueryStatement, ast.CreateView, ast.DescribeQuery, ast.SummarizeQuery)):
        return _reads_only_ordinary_tables(relations or query_relations(statement), catalog)
    if isinstance(statement, ast.Explain):
        return is_plain_sql(statement.statement, catalog, relations)
    if isinstance(statement, (ast.InsertValues, ast.InsertQuery, ast.Update, ast.Delete)):
        return _is_ordinary(statement.table, catalog)
    if isinstance(statement, (ast.Describe, ast.Summarize)):
        return _is_ordinary(statement.name, catalog)
    if isinstance(statement, ast.CopyTo):  # DuckDB's COPY of ordinary tables and queries over them
        if isinstance(statement.source, str):
            return _is_ordinary(statement.source, catalog)
        return _reads_only_ordinary_tables(_walk_relations(statement.source), catalog)
    if isinstance(statement, ast.CopyFrom):
        return _is_ordinary(statement.name, catalog)
    if isinstance(statement, (ast.Drop, ast.AlterRename)):
        return _duckdb_owns(statement, catalog)
    if isinstance(statement, ast.ShowSetting):  # SHOW of a tensor or trdb view describes it
        return statement.name.lower() not in SETTINGS and not catalog.has_tensor(statement.name) \
            and catalog.view(statement.name) is None
    if isinstance(statement, (ast.SetSetting, ast.ResetSetting)):
        return statement.name.lower() not in SETTINGS
    return False


def _duckdb_owns(statement, catalog: Catalog) -> bool:
    """DROP / ALTER of DuckDB's tables and views go to DuckDB, as does DROP TABLE IF EXISTS of nothing."""
    if statement.kind == "TENSOR":
        return False
    if _is_ordinary(statement.name, catalog):
        return True
    nothing = catalog.kind_of(statement.name) is None
    return nothing and statement.kind == "TABLE" and getattr(statement, "if_exists", False)


_DOT_FORMAT = re.compile(r"(\bFORMAT\s+)(?:dot|\"dot\")\b", re.I)


def duckdb_text(statement, text: str) -> str:
    """The text DuckDB runs for a plain statement: EXPLAIN (FORMAT dot) is DuckDB's FORMAT graphviz."""
    if isinstance(statement, ast.Explain) and statement.format == "dot":
        return _DOT_FORMAT.sub(r"\1graphviz", text, count=1)
    return text


def is_trql_only(text: str) -> bool:
    """Statements that only trql has (never tried as plain SQL when they fail to parse)."""
    return bool(_TRQL_ONLY.match(text))


_GAP = r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/)+"  # white space and comments between words
_SETTING_STATEMENT = re.compile(rf"\s*(?P<verb>SET|RESET){_GAP}(?P<scope>(?:GLOBAL|SESSION|LOCAL){_GAP})?"
                                rf"(?P<name>\"[^\"]*\"|[A-Za-z_]\w*)", re.I | re.S)
_PARAMETER = re.compile(r"\?|\$\w+")


def trdb_setting_hint(text: str) -> Optional[str]:
    """For a SET or RESET of one of trdb's settings that trql could not parse, the hint its error gets (the
    text never goes to DuckDB, which does not know the setting or, as for s3_endpoint, loads an extension
    for a name it shares); None for any other text."""
    found = _SETTING_STATEMENT.match(text)
    name = found and found.group("name").strip('"').lower()
    if not name or name not in SETTINGS:
        return None
    if found.group("scope"):
        return f"trdb's settings have no scope: {found.group('verb').upper()} {name} (it sets this connection's " \
               "value; the database-wide ones are shared by every connection)"
    if found.group("verb").upper() == "SET" and _PARAMETER.search(text, found.end()):
        return f"SET {name} takes a literal value, not a parameter: write the value in the text, or pass it as " \
               f"trdb.connect(path, {name}=value)"
    return f"SET {name} = value takes one literal: a number, a 'string', or on / off"


def names_trdb_relation(text: str, catalog: Catalog) -> bool:
    """Whether the text mentions a tensor or a trdb view by name."""
    words = {fold(w) for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}
    trdb_names = {fold(m.name) for m in catalog.tensors()} | {fold(v[0]) for v in catalog.views()}
    return bool(words & trdb_names)
