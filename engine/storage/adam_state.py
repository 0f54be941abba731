"""Adam's step count per parameter, kept in trdb's `_trdb.adam_steps` table (catalog_format makes it)."""
from __future__ import annotations

from trdb.storage.catalog_format import ADAM_STEPS as _STEPS
from trdb.storage.catalog_format import has_adam_steps
from trdb.storage.database import Database


def read_adam_steps(db: Database, params: list[str]) -> dict[str, int]:
    """The step counts stored for several parameters (those without one left out), in one query: a MINIMIZE
    reads its parameters' at its start (a training loop of one-step MINIMIZEs did two statements a parameter).
    A writable database has the table from the time it is opened; one open read-only may not."""
    if not params or (db.read_only and not has_adam_steps(db)):
        return {}
    found = db.execute(f"SELECT param, step FROM {_STEPS} WHERE param IN ({', '.join('?' * len(params))})", params)
    return {param: step for param, step in found if step is not None}


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
    """Every parameter's step count (none before the first Adam step; a database open read-only may have no table)."""
    if not has_adam_steps(db):
        return {}
    return {param: int(step) for param, step in db.execute(f"SELECT param, step FROM {_STEPS} ORDER BY param")}


def drop_adam_step(db: Database, param: str) -> None:
    """Forget a parameter's step count (its name matched case-insensitively), where there is one."""
    if has_adam_steps(db):
        db.execute(f"DELETE FROM {_STEPS} WHERE lower(param) = lower(?)", [param])


def rename_adam_step(db: Database, param: str, new_name: str) -> None:
    """Move a parameter's step count to its new name (ALTER TENSOR ... RENAME), where there is one."""
    if has_adam_steps(db):
        db.execute(f"UPDATE {_STEPS} SET param = ? WHERE lower(param) = lower(?)", [new_name, param])
