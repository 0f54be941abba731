"""FILL clauses of CREATE TENSOR: ZEROS, ONES, CONSTANT, IDENTITY, RANDOM_NORMAL, RANDOM_UNIFORM."""
from __future__ import annotations

import itertools
import math
import threading
from collections import deque
from typing import Callable, Optional

import numpy as np

from trdb.errors import DataError, Error, ProgrammingError, QueryCancelled
from trdb.ingest.tile_seeds import generator_at, pcg64_states
from trdb.ingest.tiling import grid_keys, tile_slices
from trdb.storage.tensor_meta import TensorMeta

TileMaker = Callable[[tuple[int, ...]], np.ndarray]
# elements of a random tile drawn at once: about 10 ms of work, so a cancelled FILL of large tiles stops soon
DRAW_CHUNK = 1 << 20
_ARITY = {"ZEROS": (0, 0), "ONES": (0, 0), "CONSTANT": (1, 1), "IDENTITY": (0, 0),
          "RANDOM_NORMAL": (2, 3), "RANDOM_UNIFORM": (2, 3)}


def fill_maker(meta: TensorMeta, kind: str, args: list, interrupted: Optional[threading.Event] = None) -> TileMaker:
    """A function from a tile key to its tile. Every FILL writes every tile, ZEROS too: zeros are values.
    Once `interrupted` is set, making a large random tile stops with QueryCancelled."""
    low, high = _ARITY[kind]
    if not low <= len(args) <= high:
        raise ProgrammingError(f"FILL {kind} takes {low if low == high else f'{low} to {high}'} "
                               f"argument(s), got {len(args)}")
    for position, value in enumerate(args):
        if not is_number(value):
            raise argument_error(ProgrammingError(f"FILL {kind} takes numbers, not {_described(value)}",
                                                  hint=_number_hint(kind, value)), position)
    shape_at = meta.tile_shape_at
    if kind in ("ZEROS", "ONES", "CONSTANT"):
        value = {"ZEROS": 0, "ONES": 1}.get(kind) if kind != "CONSTANT" else _fitting(args[0], meta)
        return lambda key: np.full(shape_at(key), value, dtype=meta.dtype)
    if kind == "IDENTITY":
        return _identity(meta)
    return _random(meta, kind, args, interrupted)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def argument_error(error: Error, position: int) -> Error:
    """`error`, marked as being about FILL's argument at `position` (the caret goes under it)."""
    error.fill_argument = position
    return error


def _described(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, bool):
        return str(value).upper()
    return f"{type(value).__name__} {value!r}"[:80]


def _number_hint(kind: str, value) -> str:
    if isinstance(value, str):
        try:
            return f"write the number without quotes: {float(value.strip())!r}"
        except ValueError:
            pass
    if isinstance(value, bool):
        return "a bool tensor is filled with FILL ONES (true) or FILL ZEROS (false)"
    return {"CONSTANT": "for example FILL CONSTANT(0.5)", "RANDOM_NORMAL": "RANDOM_NORMAL(mean, std [, seed]): for "
            "example RANDOM_NORMAL(0, 1, 42)"}.get(kind, "RANDOM_UNIFORM(low, high [, seed]): for example "
                                                         "RANDOM_UNIFORM(-1, 1, 42)")


def _fitting(value, meta: TensorMeta):
    """`value` when the tensor's dtype holds it; otherwise a DataError (no silent inf or wrap-around)."""
    if not isinstance(value, int) and not np.isfinite(value):  # a Python int is finite, and may pass int64
        if meta.dtype.kind == "f":
            return value  # NaN and inf are float values, asked for
        raise DataError(f"FILL: {value} cannot be stored as {meta.dtype} (integers have no NaN or inf)")
    if meta.dtype.kind == "f":
        if abs(value) > float(np.finfo(meta.dtype).max):
            raise DataError(f"FILL: {value} overflows {meta.dtype} (it would become inf)",
                            hint="give DTYPE float64 to keep it")
    elif meta.dtype.kind in "iu":
        bits = np.iinfo(meta.dtype)
        if not bits.min <= value <= bits.max or (isinstance(value, float) and not value.is_integer()):
            raise DataError(f"FILL: {value} does not fit in {meta.dtype} (range {bits.min}..{bits.max}, "
                            f"integers only)", hint="give DTYPE float64 to keep it")
    return value


def _identity(meta: TensorMeta) -> TileMaker:
    if len(meta.shape) != 2 or len(meta.keys) != 2:
        raise ProgrammingError(f"FILL IDENTITY needs a 2-d tensor with two keys, not shape {meta.shape}")

    def make(key: tuple[int, ...]) -> np.ndarray:
        rows, cols = tile_slices(meta, key)
        return (np.arange(rows.start, rows.stop)[:, None] == np.arange(cols.start, cols.stop)[None, :]) \
            .astype(meta.dtype)
    return make


def _random(meta: TensorMeta, kind: str, args: list, interrupted: Optional[threading.Event]) -> TileMaker:
    if len(args) == 3 and (not isinstance(args[2], int) or args[2] < 0):
        raise argument_error(ProgrammingError(f"FILL {kind}: the seed must be a non-negative integer, got {args[2]}",
                                              hint="a seed is a whole number such as 42"), 2)
    if kind == "RANDOM_NORMAL" and not args[1] >= 0:
        raise argument_error(ProgrammingError(f"FILL RANDOM_NORMAL: the standard deviation must be >= 0, got "
                                              f"{args[1]}"), 1)
    if kind == "RANDOM_UNIFORM" and not args[0] <= args[1]:
        raise ProgrammingError(f"FILL RANDOM_UNIFORM(low, high): low must not exceed high, got "
                               f"({args[0]}, {args[1]})", hint=f"RANDOM_UNIFORM({args[1]}, {args[0]})")
    first, second = (float(a) for a in args[:2])  # (low, high) or (mean, std); floats: 6 std may pass int64
    for bound in ([first, second] if kind == "RANDOM_UNIFORM" else [first - 6 * second, first + 6 * second]):
        if not np.isfinite(bound) and np.isfinite([first, second]).all():
            raise DataError(f"FILL {kind}{tuple(args[:2])}: its values would overflow to inf",
                            hint="give a smaller mean and spread")
        _fitting(bound, meta)
    # one generator per tile, seeded by (seed, key): the values do not depend on the order of tiles
    seed = args[2] if len(args) == 3 else int(np.random.SeedSequence().entropy % (1 << 63))
    generators = _SeededGenerators(meta, seed)

    def draw(rng: np.random.Generator, size) -> np.ndarray:
        if kind == "RANDOM_NORMAL":
            return rng.standard_normal(size, dtype=np.float64) * args[1] + args[0]
        return rng.uniform(args[0], args[1], size)

    def make(key: tuple[int, ...]) -> np.ndarray:
        rng, shape = generators.at(key), meta.tile_shape_at(key)
        if math.prod(shape) <= DRAW_CHUNK:
            return draw(rng, shape).astype(meta.dtype)
        # a large tile is drawn a chunk at a time (the same values: the generator's stream is drawn in order),
        # so that a cancelled statement stops within a chunk, not after a tile that takes seconds
        tile = np.empty(shape, dtype=meta.dtype)
        flat = tile.reshape(-1)
        for start in range(0, flat.size, DRAW_CHUNK):
            if interrupted is not None and interrupted.is_set():
                raise QueryCancelled(f"the statement was cancelled while it made the tiles of {meta.name}")
            stop = min(flat.size, start + DRAW_CHUNK)
            flat[start:stop] = draw(rng, stop - start)
        return tile
    return make


class _SeededGenerators:
    """The generator numpy.random.default_rng([seed, *key]) is for each key, as keys come in grid order: their
    states computed a run of keys at once (tile_seeds.py), one generator set to each in turn."""

    RUN = 4096

    def __init__(self, meta: TensorMeta, seed: int):
        self.seed = seed
        self.keys = grid_keys(meta)
        self.ready: deque = deque()
        self.generator = np.random.Generator(np.random.PCG64())

    def at(self, key: tuple[int, ...]) -> np.random.Generator:
        if not self.ready:
            run = list(itertools.islice(self.keys, self.RUN))
            states = pcg64_states(self.seed, np.array(run, dtype=np.int64).reshape(len(run), -1)) if run else None
            self.ready.extend(zip(run, states) if states is not None else [])
        if self.ready and self.ready[0][0] == tuple(key):
            return generator_at(self.generator, self.ready.popleft()[1])
        self.ready.clear()  # a key out of grid order (or one too large for 32 bits): seeded as numpy does it
        return np.random.default_rng([self.seed, *key])
