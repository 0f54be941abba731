"""Names of optimizer state (Adam's moments, stored as tensors): a namespace of trdb's own that users cannot create in."""
from __future__ import annotations

from typing import Optional

from trdb.catalog.names import fold
from trdb.errors import ProgrammingError

STATE_PREFIX = "__trdb_"
MOMENTS = ("adam_m", "adam_v")


def moment_name(param: str, moment: str) -> str:
    """The tensor holding `moment` ('adam_m' or 'adam_v') of parameter `param`."""
    return f"{STATE_PREFIX}{moment}__{param}"


def moment_names(param: str) -> tuple[str, ...]:
    return tuple(moment_name(param, moment) for moment in MOMENTS)


def state_parameter(name: str) -> Optional[str]:
    """The parameter whose optimizer state a tensor of this name is, or None for any other name."""
    for moment in MOMENTS:
        prefix = moment_name("", moment)
        if fold(name).startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix):]
    return None


def is_reserved(name: str) -> bool:
    return fold(name).startswith(STATE_PREFIX)


def refuse_reserved(name: str) -> None:
    """A user's tensor may not take a name of trdb's own namespace (state there is hidden, overwritten by
    MINIMIZE and dropped with its parameter)."""
    if is_reserved(name):
        raise ProgrammingError(f'"{name}": names that begin with {STATE_PREFIX} are reserved for trdb\'s '
                               "optimizer state", hint="choose another name")
