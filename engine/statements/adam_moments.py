"""Adam's state between MINIMIZE steps: a parameter's moments, tensors beside it, and its step count."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from trdb.autodiff.update_rules import adam_step
from trdb.catalog.optimizer_state import moment_names
from trdb.errors import DataError
from trdb.execution.tile_math.stacked_tiles import MAX_STACKED_ELEMENTS
from trdb.statements.context import StatementContext
from trdb.statements.parameter_stacks import same_keys, stacked, stored_stack
from trdb.statements.step_writes import Written, replace_stack, replace_tiles, tiles_by_key
from trdb.storage.tensor_meta import TensorMeta

if TYPE_CHECKING:
    from trdb.statements.minimize import Options


class AdamState:
    """Adam's first and second moments of one parameter, stored as tensors beside it.

    State that does not fit the parameter (a moment missing, no step count, or moments of another
    shape, tile or dtype, left by an older database) is dropped and Adam starts fresh."""

    def __init__(self, sc: StatementContext, param: TensorMeta, step: Optional[int]):
        """`step`: the step count stored for the parameter (None: none is)."""
        self.sc = sc
        self.param_name = param.name
        moments = [_moment(sc, name) for name in moment_names(param.name)]
        stored = step is not None and all(m is not None and _fits(m, param) for m in moments)
        if not stored:
            drop_optimizer_state(sc, param.name)
            step, moments = 0, [None, None]
        self.moments = [m or _create_moment(sc, param, name) for m, name in zip(moments, moment_names(param.name))]
        self.step = step

    def direction(self, keys: list[tuple], grads: list[np.ndarray], options: Options,
                  writes: list["Written"]) -> list[np.ndarray]:
        """Adam's bias-corrected step direction for these gradient tiles; the moments are written back (into
        `writes`, which `finish_writes` completes), the step count, advanced, by `minimize` with the others'."""
        self.step += 1
        m_meta, v_meta = self.moments
        m_old, v_old = tiles_by_key(self.sc, m_meta), tiles_by_key(self.sc, v_meta)
        ms, vs, out = [None] * len(keys), [None] * len(keys), [None] * len(keys)
        for positions in _by_shape(grads):  # tiles of one shape at once (elementwise: as one by one)
            grad = stacked([grads[p] for p in positions])
            m, v, step = adam_step(grad, _stacked_moment(m_old, keys, positions, grad.shape, m_meta.dtype),
                                   _stacked_moment(v_old, keys, positions, grad.shape, v_meta.dtype), self.step,
                                   options.beta1, options.beta2, options.epsilon)
            m, v = np.asarray(m, dtype=m_meta.dtype), np.asarray(v, dtype=v_meta.dtype)
            for index, p in enumerate(positions):
                ms[p], vs[p], out[p] = m[index], v[index], step[index]
        writes.append(replace_tiles(self.sc, m_meta, keys, ms, set(m_old) <= set(keys)))
        writes.append(replace_tiles(self.sc, v_meta, keys, vs, set(v_old) <= set(keys)))
        return out

    def stacked_direction(self, keys: np.ndarray, grad: np.ndarray, options: Options,
                          writes: list["Written"]) -> Optional[np.ndarray]:
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
        writes.append(replace_stack(self.sc, m_meta, keys, m, not fresh))
        writes.append(replace_stack(self.sc, v_meta, keys, v, not fresh))
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


def _stacked_moment(old: dict, keys: list[tuple], positions: list[int], shape: tuple, dtype: np.dtype) -> np.ndarray:
    """The stored moments of the tiles at `positions` stacked (zeros where a moment has no tile yet)."""
    moments = [old.get(keys[p]) for p in positions]
    if all(m is not None for m in moments):
        return stacked(moments)
    filled = np.zeros(shape, dtype=dtype)
    for index, moment in enumerate(moments):
        if moment is not None:
            filled[index] = moment
    return filled


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
    """Drop a parameter's Adam moments (in the statement's transaction), where there are any. Its step count
    is in its catalog row: dropped with the parameter, and written afresh by the step of a MINIMIZE whose
    Adam starts over (steps are at least one, in the transaction that found the state unfit)."""
    for name in moment_names(param_name):
        if _exists(sc, name):
            sc.catalog.drop_tensor(name)


def rename_optimizer_state(sc: StatementContext, param_name: str, new_name: str) -> None:
    """Move a parameter's Adam moments to its new name (moments left under the new name by a tensor dropped
    long ago are dropped first); its step count is in its catalog row, renamed with it."""
    if param_name.lower() != new_name.lower():
        drop_optimizer_state(sc, new_name)
    for name, new in zip(moment_names(param_name), moment_names(new_name)):
        if _exists(sc, name):
            sc.catalog.rename_tensor(name, new, internal=True)


def _exists(sc: StatementContext, name: str) -> bool:
    try:
        return sc.catalog.tensor(name) is not None
    except DataError:  # damaged, but there: dropping removes it
        return True
