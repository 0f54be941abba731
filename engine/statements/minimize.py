"""MINIMIZE view WRT (params) WITH (...): gradient descent (SGD or Adam) with the gradients as queries.

Each step evaluates the loss and every parameter's gradient plan at the same parameter values,
then updates the stored tiles; each step commits on its own (outside an explicit transaction), so
an interrupted run keeps its completed steps (`commit_every = n`: every n steps commit together).
Adam's moments are tensors `__trdb_adam_m__<param>` and `__trdb_adam_v__<param>` in the database
(catalog/optimizer_state.py: a namespace users cannot create in), and its step count is in
`_trdb.adam_steps`.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from trdb.autodiff.update_rules import adam_step, sgd_direction, sgd_stepped
from trdb.catalog.names import did_you_mean, fold
from trdb.catalog.optimizer_state import moment_names
from trdb.errors import DataError, ProgrammingError
from trdb.execution.result import Result
from trdb.execution.tile_math.stacked_tiles import MAX_STACKED_ELEMENTS
from trdb.ingest.tiling import CHUNK_BYTES
from trdb.kernels.backend import to_host
from trdb.kernels.sparse import dense
from trdb.optimizer.common_subplans import sharing_projections
from trdb.parser import ast
from trdb.pipeline.plan_memo import PlanMemo
from trdb.plan import logical as lp
from trdb.plan.types import Column, ScalarType
from trdb.statements.context import StatementContext
from trdb.statements.parameter_stacks import full_gradient, gradient_stack, positions_in, same_keys, stored_stack
from trdb.storage import tile_store
from trdb.storage.adam_state import drop_adam_step, read_adam_steps, rename_adam_step, write_adam_steps
from trdb.storage.tensor_meta import TensorMeta
from trdb.storage.tile_writer import TileWriter

# Called with (step, steps, loss) once each step has committed, in the thread running MINIMIZE: the shell's progress.
STEP_LISTENER: ContextVar[Optional[Callable[[int, int, float], None]]] = ContextVar("minimize_steps", default=None)

_DEFAULTS = {"optimizer": "sgd", "learning_rate": None, "steps": 100, "beta1": 0.9, "beta2": 0.999,
             "epsilon": 1e-8, "clamp_min": None, "clamp_max": None, "commit_every": 1}
_CLAMPS = ("clamp_min", "clamp_max")  # a projection of the new values after each step (NNMF's clamp at 0)


@dataclass(frozen=True)
class Options:
    optimizer: str
    learning_rate: float
    steps: int
    beta1: float
    beta2: float
    epsilon: float
    clamp_min: Optional[float] = None
    clamp_max: Optional[float] = None
    commit_every: int = 1  # steps a transaction holds (the last one holds the steps that are left)


def parse_options(sc: StatementContext, node: ast.Minimize) -> Options:
    values, given = dict(_DEFAULTS), set()
    for name, expr in node.options:
        key = name.lower()
        if key not in _DEFAULTS:
            raise ProgrammingError(f'MINIMIZE: unknown option "{name}"', hint=did_you_mean(key, _DEFAULTS))
        values[key] = sc.constant(expr)
        given.add(key)
    optimizer = str(values["optimizer"]).lower()
    if optimizer not in ("sgd", "adam"):
        raise ProgrammingError(f"MINIMIZE: optimizer must be 'sgd' or 'adam', got {values['optimizer']!r}")
    if values["learning_rate"] is None:
        values["learning_rate"] = 0.01 if optimizer == "sgd" else 0.001
    for key in ("steps", "commit_every"):
        if not isinstance(values[key], int) or isinstance(values[key], bool) or values[key] < 1:
            raise ProgrammingError(f"MINIMIZE: {key} must be a positive integer, got {values[key]!r}")
    numbers = {k: _number(k, values[k]) for k in ("learning_rate", "beta1", "beta2", "epsilon")}
    for key in ("beta1", "beta2"):
        if not 0 <= numbers[key] < 1:
            raise ProgrammingError(f"MINIMIZE: {key} must be at least 0 and below 1, got {numbers[key]!r}")
    if numbers["epsilon"] <= 0:
        raise ProgrammingError(f"MINIMIZE: epsilon must be positive, got {numbers['epsilon']!r}")
    clamps = {k: _number(k, values[k]) for k in _CLAMPS if k in given}  # NULL given is refused, as elsewhere
    if len(clamps) == 2 and clamps["clamp_min"] > clamps["clamp_max"]:
        raise ProgrammingError(f"MINIMIZE: clamp_min must be at most clamp_max, got clamp_min = "
                               f"{clamps['clamp_min']!r} and clamp_max = {clamps['clamp_max']!r}")
    return Options(optimizer, steps=values["steps"], commit_every=values["commit_every"], **numbers, **clamps)


def _clamped(new: np.ndarray, options: Options) -> np.ndarray:
    """The step's new values projected onto [clamp_min, clamp_max] in place (np.clip: NaN stays NaN)."""
    if options.clamp_min is not None or options.clamp_max is not None:
        np.clip(new, options.clamp_min, options.clamp_max, out=new)
    return new


def _number(key: str, value) -> float:
    """An option's value as a finite float: a string, NULL, boolean or inf is a ProgrammingError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(float(value)):
        raise ProgrammingError(f"MINIMIZE: {key} must be a finite number, got {value!r}")
    return float(value)


class AdamState:
    """Adam's first and second moments of one parameter, stored as tensors beside it.

    State that does not fit the parameter (a moment missing, no step count, or moments of another
    shape, tile or dtype, left by an older database) is dropped and Adam starts fresh."""

    def __init__(self, sc: StatementContext, param: TensorMeta, step: Optional[int]):
        """`step`: the step count stored for the parameter (None: none is)."""
        self.sc = sc
        self.param_name = param.name
        moments = [_moment(sc, name) for name in moment_names(param.name)]
        self.stored = step is not None and all(m is not None and _fits(m, param) for m in moments)
        if not self.stored:
            drop_optimizer_state(sc, param.name)
            step, moments = 0, [None, None]
        self.moments = [m or _create_moment(sc, param, name) for m, name in zip(moments, moment_names(param.name))]
        self.step = step

    def direction(self, keys: list[tuple], grads: list[np.ndarray], options: Options,
                  writes: list["_Written"]) -> list[np.ndarray]:
        """Adam's bias-corrected step direction for these gradient tiles; the moments are written back (into
        `writes`, which `_finish` completes), the step count, advanced, by `minimize` with the others'."""
        self.step += 1
        m_meta, v_meta = self.moments
        m_old, v_old = _tiles_by_key(self.sc, m_meta), _tiles_by_key(self.sc, v_meta)
        ms, vs, out = [None] * len(keys), [None] * len(keys), [None] * len(keys)
        for positions in _by_shape(grads):  # tiles of one shape at once (elementwise: as one by one)
            grad = _stacked([grads[p] for p in positions])
            m, v, step = adam_step(grad, _stacked_moment(m_old, keys, positions, grad.shape, m_meta.dtype),
                                   _stacked_moment(v_old, keys, positions, grad.shape, v_meta.dtype), self.step,
                                   options.beta1, options.beta2, options.epsilon)
            m, v = np.asarray(m, dtype=m_meta.dtype), np.asarray(v, dtype=v_meta.dtype)
            for index, p in enumerate(positions):
                ms[p], vs[p], out[p] = m[index], v[index], step[index]
        writes.append(_replace_tiles(self.sc, m_meta, keys, ms, set(m_old) <= set(keys)))
        writes.append(_replace_tiles(self.sc, v_meta, keys, vs, set(v_old) <= set(keys)))
        return out

    def stacked_direction(self, keys: np.ndarray, grad: np.ndarray, options: Options,
                          writes: list["_Written"]) -> Optional[np.ndarray]:
        """`direction` for a whole parameter as one stack (`grad` float64 `(n, *tile)` under `keys`, in key
        order): None, with nothing changed, where the stored moments are not under those keys (tile by tile
        then)."""
        reads = [self.sc.catalog.tiles(self.sc.catalog.require_tensor(m.name)) for m in self.moments]
        fresh = all(len(read[0]) == 0 for read in reads)  # no moment yet: zeros
        stored = [stored_stack(*read) for read in reads]
        if not fresh and not same_keys(stored, keys):
            return None
        self.step += 1
        m_meta, v_meta = self.moments
        old = [np.zeros(grad.shape, meta.dtype) if fresh else s.tiles for s, meta in zip(stored, self.moments)]
        m, v, direction = adam_step(grad, old[0], old[1], self.step, options.beta1, options.beta2, options.epsilon)
        writes.append(_replace_stack(self.sc, m_meta, keys, m, not fresh))
        writes.append(_replace_stack(self.sc, v_meta, keys, v, not fresh))
        return direction


def _by_shape(tiles: list[np.ndarray]) -> list[list[int]]:
    """The positions of the tiles, by shape; a large tile alone (stacking would only copy it)."""
    groups: dict[tuple, list[int]] = {}
    alone = []
    for position, tile in enumerate(tiles):
        if tile.size > MAX_STACKED_ELEMENTS:
            alone.append([position])
        else:
            groups.setdefault(tile.shape, []).append(position)
    return list(groups.values()) + alone


def _stacked(tiles: list[np.ndarray]) -> np.ndarray:
    """The tiles along a new first axis: one tile as a view, several copied."""
    return tiles[0][np.newaxis] if len(tiles) == 1 else np.stack(tiles)


def _stacked_moment(old: dict, keys: list[tuple], positions: list[int], shape: tuple, dtype: np.dtype) -> np.ndarray:
    """The stored moments of the tiles at `positions` stacked (zeros where a moment has no tile yet)."""
    moments = [old.get(keys[p]) for p in positions]
    if all(m is not None for m in moments):
        return _stacked(moments)
    stacked = np.zeros(shape, dtype=dtype)
    for index, moment in enumerate(moments):
        if moment is not None:
            stacked[index] = moment
    return stacked


def _moment(sc: StatementContext, name: str) -> TensorMeta | None:
    try:
        return sc.catalog.tensor(name)
    except DataError:  # a damaged moment tensor: it is dropped and Adam starts fresh
        return None


def _fits(moment: TensorMeta, param: TensorMeta) -> bool:
    return (moment.shape, moment.tile, moment.dtype, len(moment.keys)) == \
        (param.shape, param.tile, param.dtype, len(param.keys))


def _create_moment(sc: StatementContext, param: TensorMeta, name: str) -> TensorMeta:
    return sc.catalog.create_tensor(TensorMeta(name, param.keys, param.value_name, param.dtype,
                                               param.shape, param.tile, ""), internal=True)


def drop_optimizer_state(sc: StatementContext, param_name: str) -> None:
    """Drop a parameter's Adam moments and step count (in the statement's transaction), where there are any."""
    for name in moment_names(param_name):
        if _exists(sc, name):
            sc.catalog.drop_tensor(name)
    drop_adam_step(sc.db, param_name)


def rename_optimizer_state(sc: StatementContext, param_name: str, new_name: str) -> None:
    """Move a parameter's Adam moments and step count to its new name (state left under the new name by
    a tensor dropped long ago is dropped first)."""
    if param_name.lower() != new_name.lower():
        drop_optimizer_state(sc, new_name)
    for name, new in zip(moment_names(param_name), moment_names(new_name)):
        if _exists(sc, name):
            sc.catalog.rename_tensor(name, new, internal=True)
    rename_adam_step(sc.db, param_name, new_name)


def _exists(sc: StatementContext, name: str) -> bool:
    try:
        return sc.catalog.tensor(name) is not None
    except DataError:  # damaged, but there: dropping removes it
        return True


def _tiles_by_key(sc: StatementContext, meta: TensorMeta) -> dict[tuple, np.ndarray]:
    keys, tiles = sc.catalog.tiles(sc.catalog.require_tensor(meta.name))
    return {tuple(k): dense(t) for k, t in zip(keys.tolist(), tiles)}  # updates fill CSR tiles in


@dataclass
class _Written:
    """A tensor a step wrote, whose statistics and kept tiles wait for the step's other writes (one catalog
    UPDATE for them all): `counted` the writer's statistics where it wrote the tensor whole, else None."""
    meta: TensorMeta
    counted: Optional[tuple]
    keys: np.ndarray
    kept: Optional[list]


def _replace_tiles(sc: StatementContext, meta: TensorMeta, keys: list[tuple], tiles: list[np.ndarray],
                   whole: bool = False) -> _Written:
    """Write `tiles` under `keys` in place of the stored ones; `whole`: `keys` cover every stored tile
    (the tensor is written afresh, with no DELETE of each key). `_finish` completes the write."""
    meta = sc.catalog.require_tensor(meta.name)
    key_array = np.array(keys, dtype=np.int64).reshape(len(keys), len(meta.keys))
    tile_store.delete_tiles(sc.db, meta, None if whole else key_array)
    # the buffer pool will keep the new tensor, if it is small enough: the next step reads nothing back
    kept: Optional[list] = [] if whole and sc.catalog.pool.would_keep(
        sum(np.size(tile) for tile in tiles) * meta.dtype.itemsize) else None
    with TileWriter(sc.db, meta, CHUNK_BYTES) as writer:  # inserted a batch at a time, each cast as it goes in
        writer.add_cast(keys, tiles, meta.dtype, kept)
    written = writer.statistics
    if kept is not None and (written.tuples != len(kept) or written.csr_tuples):
        kept = None  # a tile stored CSR (or skipped, all zeros): a read would not give them as they are here
    return _Written(meta, written.as_tuple() if whole else None, key_array, kept)


def _replace_stack(sc: StatementContext, meta: TensorMeta, keys: np.ndarray, stack: np.ndarray,
                   stored: bool) -> _Written:
    """`_replace_tiles` of every tile, as one stack `(n, *tile)` (cast to the tensor's dtype) under `keys`;
    `stored`: those are the keys stored now (one tile is then written over in place where it can be)."""
    meta = sc.catalog.require_tensor(meta.name)
    stack = np.ascontiguousarray(stack, dtype=meta.dtype)
    written = tile_store.WrittenStatistics(len(meta.keys), meta.grid)
    if not (stored and tile_store.overwrite_tile(sc.db, meta, keys, stack, written)):
        tile_store.delete_tiles(sc.db, meta, None)
        with TileWriter(sc.db, meta, CHUNK_BYTES) as writer:
            writer.add_stack(keys, stack)
        written = writer.statistics
    keep = sc.catalog.pool.would_keep(stack.nbytes) and written.tuples == len(stack) and not written.csr_tuples
    return _Written(meta, written.as_tuple(), keys, stack if keep else None)


def _finish(sc: StatementContext, writes: list[_Written]) -> None:
    """The step's written tensors get their statistics and new data versions, whole ones in one UPDATE; the
    buffer pool keeps what they wrote where it can."""
    counted = [w for w in writes if w.counted is not None]
    metas = sc.catalog.refresh_statistics_of([(w.meta, w.counted) for w in counted]) if counted else []
    for write, meta in zip(counted, metas):
        if write.kept is not None:
            sc.catalog.keep_written(meta, write.keys, write.kept)  # every tile stored dense: as a read gives them
    for write in writes:
        if write.counted is None:
            sc.catalog.refresh_statistics(write.meta)


def _update(sc: StatementContext, param: TensorMeta, rows: list[tuple], options: Options,
            adam: AdamState | None) -> list[_Written]:
    stacked = _stacked_update(sc, param, rows, options, adam)
    if stacked is not None:
        return stacked
    keys = [tuple(row[:-1]) for row in rows]
    grads = [dense(to_host(row[-1])) for row in rows]
    current = _tiles_by_key(sc, param)
    # the gradient covers the parameter's whole shape: a present tile the loss does not reach has a zero
    # gradient, which still moves it under Adam (its moments decay), as PyTorch steps a whole parameter
    missing = sorted(set(current) - set(keys))
    keys += missing
    grads += [np.zeros(current[key].shape, dtype=grads[0].dtype if grads else param.dtype) for key in missing]
    writes: list[_Written] = []
    if adam is not None:
        directions = adam.direction(keys, [np.asarray(g, dtype=np.float64) for g in grads], options, writes)
    else:
        directions = [sgd_direction(g, param.dtype) for g in grads]
    # in key order: the new tiles lie so in one buffer, which the next step's product reads as the whole
    # parameter without a copy (storage/whole_tensor.py)
    stepped = sorted(((key, d) for key, d in zip(keys, directions) if key in current), key=lambda kd: kd[0])
    new = [_clamped(tile, options) for tile in
           sgd_stepped([current[key] for key, _ in stepped], options.learning_rate, [d for _, d in stepped])]
    writes.append(_replace_tiles(sc, param, [key for key, _ in stepped], new, set(current) <= set(keys)))
    return writes


def _stacked_update(sc: StatementContext, param: TensorMeta, rows, options: Options,
                    adam: AdamState | None) -> Optional[list[_Written]]:
    """`_update` of a parameter whose tiles are one stack and whose gradient is one under its keys
    (statements/parameter_stacks.py): whole-array arithmetic and stacked writes; None where it is not so."""
    current = stored_stack(*sc.catalog.tiles(param))
    gradient = gradient_stack(rows, len(param.keys)) if current is not None else None
    if gradient is None or gradient.tiles.shape[1:] != current.tiles.shape[1:]:
        return None
    positions = positions_in(gradient, current, param)
    if positions is None:
        return None
    writes: list[_Written] = []
    if adam is not None:
        direction = adam.stacked_direction(current.keys, full_gradient(gradient, positions, len(current.keys),
                                                                      np.float64), options, writes)
        if direction is None:
            return None
    else:  # in the parameter's precision where the gradient has it, as `sgd_direction`
        dtype = sgd_direction(gradient.tiles[:0], param.dtype).dtype
        direction = full_gradient(gradient, positions, len(current.keys), dtype)
    new = np.multiply(direction, -options.learning_rate)  # the same values as `sgd_stepped`
    new += current.tiles
    _clamped(new, options)
    writes.append(_replace_stack(sc, param, current.keys, new, True))
    return writes


def step_plans(sc: StatementContext, node: ast.Minimize) -> tuple[lp.Plan, list[TensorMeta], list[lp.Plan]]:
    """The plans of one step: the loss, then each parameter's gradient; expanded, so that what they share
    (the forward pass) is seen before the first of them runs."""
    params = [sc.catalog.require_tensor(name) for name in node.params]

    def bind() -> list[lp.Plan]:
        binder = sc.binder()
        loss = sc.pipeline.expand(binder.bind_table(ast.TableRef(node.view, span=node.span)), dense=False)
        gradients = [sc.pipeline.expand(binder.bind_grad(ast.GradRef(node.view, p.name, span=node.span)))
                     for p in params]
        return sharing_projections([loss, *gradients])
    if sc.plan_memo is None:
        loss, *gradients = bind()
    else:  # a training loop of MINIMIZE statements binds once
        key = ("MINIMIZE", fold(node.view), tuple(fold(p.name) for p in params), sc.settings.snapshot())
        loss, *gradients = sc.plan_memo.bound_plans(key, sc.catalog, bind)
    return loss, params, gradients


def minimize(sc: StatementContext, node: ast.Minimize,
             step_transaction: Callable[[], AbstractContextManager]) -> Result:
    options = parse_options(sc, node)
    loss_plan, params, gradients = step_plans(sc, node)
    # the steps after the first plan nothing (their plans are the first's), nor do later MINIMIZEs of this connection
    sc.pipeline.memo = sc.plan_memo if sc.plan_memo is not None else PlanMemo()
    adams: list = [None] * len(params)
    rows = []
    for first in range(1, options.steps + 1, options.commit_every):
        last = min(first + options.commit_every, options.steps + 1)
        with step_transaction():  # `commit_every` steps, committed together
            if options.optimizer == "adam" and adams[0] is None:
                stored = read_adam_steps(sc.db, [p.name for p in params])
                adams = [AdamState(sc, p, stored.get(p.name)) for p in params]
            # the step counts' rows are there from an earlier step, or from an earlier MINIMIZE
            counted = [step > 1 or all(a.stored for a in adams if a is not None) for step in range(first, last)]
            losses = [_step(sc, loss_plan, params, gradients, options, adams, stored) for stored in counted]
        for step, loss in zip(range(first, last), losses):
            rows.append((step, loss))
            if (listener := STEP_LISTENER.get()) is not None:
                listener(step, options.steps, loss)
    schema = (Column("step", ScalarType(int)), Column("loss", ScalarType(float)))
    return Result(rows=rows, schema=schema, rowcount=len(rows))


def _step(sc: StatementContext, loss_plan: lp.Plan, params: list[TensorMeta], gradients: list[lp.Plan],
          options: Options, adams: list, steps_stored: bool) -> float:
    """One step: the loss and every gradient at the same parameter values, then the parameters (and Adam's
    state) written; the loss before the step. `steps_stored`: an earlier step of this statement stored the step
    counts."""
    shared = sc.shared_work()  # the forward pass is computed once for the loss and every gradient
    shared.expect([loss_plan, *gradients])
    loss = sc.run_plan(loss_plan, shared).rows
    # at the same parameter values; a zero gradient still moves Adam's moments, so none is dropped
    results = [sc.run_plan(plan, shared, keep_zero_tuples=True).rows for plan in gradients]
    writes = [write for param, grad_rows, adam in zip(params, results, adams)
              for write in _update(sc, sc.catalog.require_tensor(param.name), grad_rows, options, adam)]
    write_adam_steps(sc.db, {adam.param_name: adam.step for adam in adams if adam is not None},
                     stored=steps_stored)
    _finish(sc, writes)
    del shared  # this step's forward pass is not read again: its tuples (and Ray workers' copies) go now
    sc.pipeline.end_step()
    return float(np.sum([np.asarray(to_host(r[-1]), dtype=np.float64) for r in loss]))
