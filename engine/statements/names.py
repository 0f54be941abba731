"""Kind-aware errors of statements that name a relation: what the name is instead, or the nearest name."""
from __future__ import annotations

from typing import Optional

from trdb.catalog.catalog import Catalog
from trdb.catalog.names import did_you_mean
from trdb.catalog.optimizer_state import state_parameter
from trdb.errors import ProgrammingError
from trdb.storage.ordinary_tables import ordinary_views


def state_owner(catalog: Catalog, name: str) -> Optional[str]:
    """The parameter whose optimizer state (Adam's moments, stored as tensors beside it) a tensor of this
    name is, or None for a user's tensor: state belongs to its parameter and is listed with it."""
    param = state_parameter(name)
    owner = catalog.tensor(param) if param is not None else None
    return owner.name if owner is not None else None


def user_tensor_names(catalog: Catalog) -> list[str]:
    """Tensors a user made (optimizer state left out)."""
    return [m.name for m in catalog.tensors() if state_owner(catalog, m.name) is None]


def names_of_kind(catalog: Catalog, kind: Optional[str]) -> list[str]:
    """Names a did-you-mean hint picks from: the relations of one kind, or of every kind (None)."""
    tensors = [m.name for m in catalog.tensors()]
    trdb_views = [v[0] for v in catalog.views()]
    ordinary = list(catalog.ordinary_tables())
    if kind is None:
        return tensors + trdb_views + ordinary
    if kind == "tensor":
        return tensors
    duck_views = ordinary_views(catalog.db) if ordinary else set()
    if kind == "view":
        return trdb_views + [t for t in ordinary if t in duck_views]
    return [t for t in ordinary if t not in duck_views]


def does_not_exist(catalog: Catalog, kind: Optional[str], name: str) -> ProgrammingError:
    """`tensor "lgits" does not exist` with `did you mean "logits"?` (kind None: any relation)."""
    word = kind or "relation"
    hint = did_you_mean(name, names_of_kind(catalog, kind))
    if hint is None and kind is not None:
        hint = did_you_mean(name, names_of_kind(catalog, None))
    return ProgrammingError(f'{word} "{name}" does not exist', hint=hint)


def wrong_kind(verb: str, expected: str, name: str, actual: str, rest: str = "") -> ProgrammingError:
    """`"logits" is a tensor, not a table` with `HINT: use DROP TENSOR logits`."""
    article = "an" if actual[0] in "aeiou" else "a"
    return ProgrammingError(f'"{name}" is {article} {actual}, not a {expected}',
                            hint=f"use {verb} {actual.upper()} {name}{rest}")


def require_kind(catalog: Catalog, verb: str, expected: str, name: str, rest: str = "") -> None:
    """Raise unless `name` is a relation of kind `expected`: the kind it is, or the nearest name."""
    actual = catalog.kind_of(name)
    if actual == expected:
        return
    if actual is None:
        raise does_not_exist(catalog, expected, name)
    raise wrong_kind(verb, expected, name, actual, rest)
