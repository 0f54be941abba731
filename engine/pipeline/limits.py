"""Refusing statements that cannot finish within max_tuples, max_bytes and memory_limit, before they run."""
from __future__ import annotations

import math
from typing import Any, Iterator, Optional

from trdb.errors import OperationalError
from trdb.plan.physical import PhysicalNode
from trdb.storage.tensor_meta import TensorMeta


def _size(count: float) -> str:
    for unit, scale in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30),
                        ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} bytes"


def _refuse(what: str, estimate: str, setting: str, limit: str) -> OperationalError:
    return OperationalError(f"{what} is estimated at {estimate}, more than {setting} ({limit})",
                            hint=f"estimate {estimate} > {setting} = {limit}: make the statement smaller, "
                                 f"or raise the limit with SET {setting}")


def check_tile(settings: Any, meta: TensorMeta) -> None:
    """One tile is held in memory whole: it must fit in memory_limit."""
    tile_bytes = math.prod(meta.tile) * meta.dtype.itemsize
    if tile_bytes > settings.memory_limit:
        raise _refuse(f"one tile of TILE {tuple(meta.tile)} ({meta.dtype})", _size(tile_bytes),
                      "memory_limit", _size(settings.memory_limit))


def check_stored(settings: Any, meta: TensorMeta, room: Optional[tuple[int, Optional[int]]] = None) -> None:
    """A tensor about to be written densely (FILL, FROM array): its tuples and bytes within the limits,
    and within the database's `room` (Database.room: disk, and memory for a database in memory)."""
    check_tile(settings, meta)
    tuples = meta.max_tuples
    if tuples > settings.max_tuples:
        raise _refuse(f"tensor {meta.name} of SHAPE {tuple(meta.shape)} TILE {tuple(meta.tile)}",
                      f"{tuples:,} tuples", "max_tuples", f"{settings.max_tuples:,}")
    total = math.prod(meta.shape) * meta.dtype.itemsize
    if total > settings.max_bytes:
        raise _refuse(f"tensor {meta.name} of SHAPE {tuple(meta.shape)} ({meta.dtype})", _size(total),
                      "max_bytes", _size(settings.max_bytes))
    if room is None:
        return
    disk, memory = room
    if total > disk + (memory or 0):
        where = (f"the {_size(disk)} free on the database's disk" if memory is None else
                 f"the {_size(disk + memory)} a database in memory can hold ({_size(memory)} of memory_limit "
                 f"for DuckDB, {_size(disk)} it may spill to temp_directory)")
        raise OperationalError(f"tensor {meta.name} of SHAPE {tuple(meta.shape)} ({meta.dtype}) is estimated at "
                               f"{_size(total)}, more than {where}",
                               hint="free disk space, or make the tensor smaller" if memory is None else
                               "connect to a database file, SET temp_directory to a larger disk, "
                               "or make the tensor smaller")


def _nodes(node: PhysicalNode) -> Iterator[PhysicalNode]:
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if id(current) not in seen:
            seen.add(id(current))
            yield current
            stack.extend(current.children)


def check_plan(settings: Any, root: PhysicalNode) -> None:
    """Every operator's estimated output within max_tuples and max_bytes, before the plan runs."""
    for node in _nodes(root):
        rows, nbytes = node.estimate.rows, node.estimate.bytes
        if rows > settings.max_tuples:
            raise _refuse(f"the output of {node.operator}", f"{rows:.3g} tuples", "max_tuples",
                          f"{settings.max_tuples:,}")
        if nbytes > settings.max_bytes:
            raise _refuse(f"the output of {node.operator}", _size(nbytes), "max_bytes",
                          _size(settings.max_bytes))
