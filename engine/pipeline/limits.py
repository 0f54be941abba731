"""Refusing statements that cannot finish within max_tuples, max_bytes and memory_limit, before they run."""
from __future__ import annotations

import math
from typing import Any, Iterator, Optional

import numpy as np

from trdb.config.unit_costs import CSR_MAX_DENSITY
from trdb.errors import OperationalError
from trdb.optimizer.cardinality import padded
from trdb.plan import expressions as bx
from trdb.plan import physical_operators as po
from trdb.plan.physical import PhysicalNode
from trdb.plan.types import TensorType
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_codec import csr_sections


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


def may_be_sparse(meta: TensorMeta) -> bool:
    """Whether a tile of `meta` may be stored as CSR (2-d, not float16: kernels/sparse.wants_csr), so that its
    size follows its non-zeros rather than its TILE."""
    return len(meta.tile) == 2 and np.dtype(meta.dtype) != np.float16


def stored_tile_bytes(meta: TensorMeta, nonzeros: np.ndarray) -> np.ndarray:
    """The bytes each tile holding `nonzeros` takes held whole, as trdb stores it: CSR where the density rule
    (kernels/sparse.wants_csr) makes it so, else dense. Tiles are taken at full TILE: an upper bound for edge
    tiles, and for counts of entries that duplicates or zeros will still shrink. In float64: a TILE's dense
    size may pass int64."""
    nonzeros = np.asarray(nonzeros, dtype=np.float64)
    elements, itemsize = math.prod(meta.tile), np.dtype(meta.dtype).itemsize
    dense = np.full(nonzeros.shape, float(elements * itemsize))
    if not may_be_sparse(meta):
        return dense
    rows = float(meta.tile[0])
    width = np.where(np.maximum(nonzeros, max(meta.tile[1], rows + 1)) < 2 ** 31, 4.0, 8.0)  # CSR32 or CSR64
    csr = sum(csr_sections(nonzeros, rows, itemsize, width))
    return np.where(nonzeros <= CSR_MAX_DENSITY * elements, csr, dense)


def check_tile(settings: Any, meta: TensorMeta, nonzeros: Optional[int] = None) -> None:
    """One tile is held in memory whole: it must fit in memory_limit. `nonzeros`: the most any tile of a
    sparse tensor holds (None: the tiles are dense), so that a CSR tile is judged by its non-zeros."""
    if nonzeros is None:
        tile_bytes = math.prod(meta.tile) * meta.dtype.itemsize
        what = f"one tile of TILE {tuple(meta.tile)} ({meta.dtype})"
    else:
        tile_bytes = float(stored_tile_bytes(meta, np.array([nonzeros]))[0])
        what = f"one tile of TILE {tuple(meta.tile)} ({meta.dtype}) holding {nonzeros:,} non-zeros"
    if tile_bytes > settings.memory_limit:
        raise _refuse(what, _size(tile_bytes), "memory_limit", _size(settings.memory_limit))


def check_stored(settings: Any, meta: TensorMeta, room: Optional[tuple[int, Optional[int]]] = None,
                 tile_nonzeros: Optional[np.ndarray] = None) -> None:
    """A tensor about to be written (FILL, FROM array, FROM COO): its tuples and bytes within the limits,
    and within the database's `room` (Database.room: disk, and memory for a database in memory).
    `tile_nonzeros`: a sparse tensor's non-zeros in each tile it will store (an upper bound); None when every
    tile of the grid is stored dense. A sparse tensor is judged by those tiles, each at its stored size."""
    if tile_nonzeros is None:
        check_tile(settings, meta)
        tuples, total = meta.max_tuples, math.prod(meta.shape) * meta.dtype.itemsize
        sized = f"tensor {meta.name} of SHAPE {tuple(meta.shape)} ({meta.dtype})"
    else:
        tile_nonzeros = np.asarray(tile_nonzeros, dtype=np.int64)
        if math.prod(meta.tile) >= 1 << 63:  # a dense TILE this large is refused by its size above
            raise OperationalError(f"TILE {tuple(meta.tile)} holds {math.prod(meta.tile):.3g} elements, and offsets "
                                   "inside a tile are BIGINT: a tile must hold fewer than 2**63",
                                   hint="give a smaller TILE")
        check_tile(settings, meta, int(tile_nonzeros.max(initial=0)))
        tuples, total = len(tile_nonzeros), float(stored_tile_bytes(meta, tile_nonzeros).sum())
        sized = (f"tensor {meta.name} of SHAPE {tuple(meta.shape)} ({meta.dtype}) with {int(tile_nonzeros.sum()):,} "
                 f"non-zeros in {tuples:,} tiles")
    if tuples > settings.max_tuples:
        raise _refuse(f"tensor {meta.name} of SHAPE {tuple(meta.shape)} TILE {tuple(meta.tile)}",
                      f"{tuples:,} tuples", "max_tuples", f"{settings.max_tuples:,}")
    if total > settings.max_bytes:
        raise _refuse(sized, _size(total), "max_bytes", _size(settings.max_bytes))
    if room is not None:
        _check_room(sized, total, room)


def _check_room(sized: str, total: int, room: tuple[int, Optional[int]]) -> None:
    disk, memory = room
    if total > disk + (memory or 0):
        where = (f"the {_size(disk)} free on the database's disk" if memory is None else
                 f"the {_size(disk + memory)} a database in memory can hold ({_size(memory)} of memory_limit "
                 f"for DuckDB, {_size(disk)} it may spill to temp_directory)")
        raise OperationalError(f"{sized} is estimated at {_size(total)}, more than {where}",
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
    """Every operator's estimated output within max_tuples and max_bytes, and every tile its kernels compute
    within memory_limit, before the plan runs."""
    for node in _nodes(root):
        _check_computed_tiles(settings, node)
        rows, nbytes = node.estimate.rows, node.estimate.bytes
        if rows > settings.max_tuples:
            raise _refuse(f"the output of {node.operator}", f"{rows:.3g} tuples", "max_tuples",
                          f"{settings.max_tuples:,}")
        if nbytes > settings.max_bytes:
            raise _refuse(f"the output of {node.operator}", _size(nbytes), "max_bytes",
                          _size(settings.max_bytes))


def _check_computed_tiles(settings: Any, node: PhysicalNode) -> None:
    """A kernel that makes a sparse tile dense (EXP of a CSR tile, a CSR tile plus 1, a group's sum of CSR
    tiles) holds the whole dense tile: where that is more than memory_limit, the statement is refused here,
    not after it allocated. (A dense tile computed from dense ones is as large as the tiles the user chose,
    each of which fit the limit when stored: operators may hold one tile past their budget.)"""
    largest = _largest_densified_tile(node)
    if largest is not None and largest[2] > settings.memory_limit:
        name, tile_type, nbytes = largest
        raise _refuse(f"a tile of {name} (TILE {tuple(tile_type.tile)}, {tile_type.dtype}) in {node.operator}, "
                      "made dense from sparse tiles,", _size(nbytes), "memory_limit", _size(settings.memory_limit))


_PRODUCTS = ("MATMUL", "EINSUM")


def _largest_densified_tile(node: PhysicalNode) -> Optional[tuple[str, TensorType, float]]:
    """(kernel or aggregate, tile type, bytes) of the largest tile `node` computes fuller than the tiles it is
    computed from; None when it computes none."""
    fill = _input_fill(node)
    largest = None
    for expr in _expressions(node.spec):
        for call in _calls(expr):
            if call.function.name in _PRODUCTS:
                continue  # as large as the tiles multiplied make them; a product of CSR tiles stays CSR if sparse
            made = _tile_fill(call, fill)
            if made > _fullest_input(call, fill):
                largest = _larger(largest, (call.function.name, call.type, _dense_bytes(call.type) * made))
    for call in _summed(node.spec):  # a group's sum is a dense tile, whatever its terms are
        if _fullest_input(call.arg, fill) < 1.0:
            largest = _larger(largest, (call.function, call.arg.type, _dense_bytes(call.arg.type)))
    return largest


def _larger(largest: Optional[tuple], candidate: tuple) -> tuple:
    return candidate if largest is None or candidate[2] > largest[2] else largest


def _dense_bytes(tile_type: TensorType) -> float:
    return float(math.prod(tile_type.tile)) * tile_type.dtype.itemsize


def _fullest_input(expr, fill: tuple[float, ...]) -> float:
    """The largest fill of the tile columns `expr` reads (1.0: dense, or unknown)."""
    found = [fill[c.index] if c.index < len(fill) else 1.0 for c in bx.tile_columns(expr)]
    return max(found, default=1.0)


def _tile_fill(expr, fill: tuple[float, ...]) -> Optional[float]:
    """How much of a dense tile a computed value holds, through nested kernels: a sum as full as its fullest
    term (a CSR tile plus a scalar, or plus a dense tile, is dense), a kernel with a sparse version as its
    sparsest argument (a scalar factor leaves it), any other kernel dense. None for a scalar that is no sum's term."""
    if isinstance(expr, bx.ColumnIndex):
        return (fill[expr.index] if expr.index < len(fill) else 1.0) if isinstance(expr.type, TensorType) else None
    if not isinstance(expr, bx.Call):
        return None
    parts = [_tile_fill(arg, fill) for arg in expr.args]
    if expr.function.name in ("+", "-"):
        return max((_scalar_fill(arg) if part is None else part for arg, part in zip(expr.args, parts)), default=1.0)
    if expr.function.keeps_sparse and expr.function.name not in _PRODUCTS:
        return min((part for part in parts if part is not None), default=1.0)
    return 1.0


def _scalar_fill(expr) -> float:
    """A sum's scalar term: zero (or NULL) adds nothing; another number, or an array, fills the tile."""
    value = getattr(expr, "value", 1.0) if isinstance(expr, bx.Const) else 1.0
    return 0.0 if value is None or (isinstance(value, (int, float, np.number)) and value == 0) else 1.0


def _input_fill(node: PhysicalNode) -> tuple[float, ...]:
    """What the stored tiles of the columns the node's expressions read cost against dense ones."""
    spec = node.spec
    if isinstance(spec, po.HashJoin) and len(node.children) == 2:
        left, right = node.children
        return padded(left.estimate.fill, len(spec.left_schema)) + padded(right.estimate.fill, len(spec.right_schema))
    return node.children[0].estimate.fill if len(node.children) == 1 else ()


def _expressions(spec: po.OperatorSpec) -> list:
    if isinstance(spec, po.Project):
        return list(spec.exprs)
    if isinstance(spec, po.Filter):
        return [spec.predicate]
    if isinstance(spec, po.HashJoin):
        return [spec.residual] if spec.residual is not None else []
    if isinstance(spec, po.HashAggregate):
        return [call.arg for call in spec.calls if call.arg is not None]
    return []


def _summed(spec: po.OperatorSpec) -> list:
    """A hash aggregate's SUM, AVG, MIN and MAX calls over tiles of known shape (COUNT keeps a number)."""
    if not isinstance(spec, po.HashAggregate):
        return []
    return [call for call in spec.calls if call.function in ("SUM", "AVG", "MIN", "MAX") and call.arg is not None
            and isinstance(call.arg.type, TensorType) and all(isinstance(d, int) for d in call.arg.type.tile)]


def _calls(expr) -> Iterator[bx.Call]:
    """The kernel calls in `expr` whose result is a tile of known shape."""
    return (node for node in bx.subexpressions(expr) if isinstance(node, bx.Call) and
            isinstance(node.type, TensorType) and all(isinstance(d, int) for d in node.type.tile))
