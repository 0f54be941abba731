"""Adam's step count per parameter, kept in trdb's `_trdb.adam_steps` table (created when first needed)."""
from __future__ import annotations

from typing import Optional

from trdb.storage.catalog_format import SCHEMA
from trdb.storage.database import Database

_STEPS = f"{SCHEMA}.adam_steps"


def read_adam_step(db: Database, param: str) -> Optional[int]:
    """The step count stored for a parameter, or None; creates the table on its first use."""
    return read_adam_steps(db, [param]).get(param)


def read_adam_steps(db: Database, params: list[str]) -> dict[str, int]:
    """The step counts stored for several parameters (those without one left out), in one query: a MINIMIZE
    reads its parameters' at its start (a training loop of one-step MINIMIZEs did two statements a parameter)."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {_STEPS} (param VARCHAR PRIMARY KEY, step BIGINT)")
    if not params:
        return {}
    found = db.execute(f"SELECT param, step FROM {_STEPS} WHERE param IN ({', '.join('?' * len(params))})", params)
    return {param: step for param, step in found if step is not None}


def write_adam_step(db: Database, param: str, step: int) -> None:
    """Store a parameter's step count (read_adam_step has created the table)."""
    write_adam_steps(db, {param: step})


def write_adam_steps(db: Database, steps: dict[str, int], stored: bool = False) -> None:
    """Store several parameters' step counts in one statement (a MINIMIZE step's, for all its parameters);
    `stored`: each has its row already (a step after the first), which one UPDATE sets: about half the cost
    of INSERT OR REPLACE, which deletes and inserts each row in the key's index."""
    if not steps:
        return
    if stored:
        cases = "WHEN ? THEN ? " * len(steps)
        changed = db.execute(f"UPDATE {_STEPS} SET step = CASE param {cases}END WHERE param IN "
                             f"({', '.join('?' * len(steps))})",
                             [value for param, step in steps.items() for value in (param, step)] + list(steps))
        if changed and changed[0][0] == len(steps):
            return
    db.execute(f"INSERT OR REPLACE INTO {_STEPS} VALUES " + ", ".join(["(?, ?)"] * len(steps)),
               [value for param, step in steps.items() for value in (param, step)])


def all_adam_steps(db: Database) -> dict[str, int]:
    """Every parameter's step count (none before the first Adam step), without creating the table."""
    if not _has_steps(db):
        return {}
    return {param: int(step) for param, step in db.execute(f"SELECT param, step FROM {_STEPS} ORDER BY param")}


def _has_steps(db: Database) -> bool:
    return bool(db.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND "
                           "table_name = 'adam_steps'", [SCHEMA]))


def drop_adam_step(db: Database, param: str) -> None:
    """Forget a parameter's step count (its name matched case-insensitively), where there is one."""
    if _has_steps(db):
        db.execute(f"DELETE FROM {_STEPS} WHERE lower(param) = lower(?)", [param])


def rename_adam_step(db: Database, param: str, new_name: str) -> None:
    """Move a parameter's step count to its new name (ALTER TENSOR ... RENAME), where there is one."""
    if _has_steps(db):
        db.execute(f"UPDATE {_STEPS} SET param = ? WHERE lower(param) = lower(?)", [new_name, param])
