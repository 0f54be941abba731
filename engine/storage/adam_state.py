"""Adam's step count per parameter, kept in the parameter's catalog row (`_trdb.tensors.adam_step`; the view
`_trdb.adam_steps` lists them). A MINIMIZE step sets its parameters' counts in the UPDATE that gives them
their new data version (`step_cases`, catalog_store.save_statistics_of): no statement of its own."""
from __future__ import annotations

from trdb.storage.catalog_format import SCHEMA
from trdb.storage.database import Database

_TENSORS = f"{SCHEMA}.tensors"


def read_adam_steps(db: Database, params: list[str]) -> dict[str, int]:
    """The step counts stored for several parameters (those without one left out), in one query: a MINIMIZE
    reads its parameters' at its start."""
    if not params:
        return {}
    found = db.execute(f"SELECT name, adam_step FROM {_TENSORS} WHERE adam_step IS NOT NULL AND name IN "
                       f"({', '.join('?' * len(params))})", params)
    return {param: step for param, step in found}


def step_cases(steps: dict[str, int]) -> tuple[str, list]:
    """The SET clause (and its parameters) of an UPDATE of `_trdb.tensors` that sets these parameters' counts."""
    if not steps:
        return "", []
    groups: dict[int, list[str]] = {}
    for param, step in steps.items():  # parameters trained together share their count: one branch (a CASE
        groups.setdefault(step, []).append(param)  # branch a name took DuckDB about 0.1 ms to bind)
    branches = "".join(f"WHEN name IN ({', '.join('?' * len(names))}) THEN ? " for names in groups.values())
    return (f"adam_step = CASE {branches}ELSE adam_step END, ",
            [value for step, names in groups.items() for value in (*names, step)])


def write_adam_steps(db: Database, steps: dict[str, int]) -> None:
    """Store several parameters' step counts in one statement (each parameter's row is there)."""
    if steps:
        cases, params = step_cases(steps)
        db.execute(f"UPDATE {_TENSORS} SET {cases.rstrip(', ')} WHERE name IN ({', '.join('?' * len(steps))})",
                   params + list(steps))


def all_adam_steps(db: Database) -> dict[str, int]:
    """Every parameter's step count (none before the first Adam step)."""
    return {param: int(step) for param, step in
            db.execute(f"SELECT name, adam_step FROM {_TENSORS} WHERE adam_step IS NOT NULL ORDER BY name")}

