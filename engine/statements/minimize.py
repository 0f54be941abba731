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

from trdb.autodiff.gradient import loss_from_terms, sums_gradient_terms
from trdb.autodiff.update_rules import sgd_direction, sgd_stepped
from trdb.catalog.names import did_you_mean, fold
from trdb.errors import ProgrammingError
from trdb.execution.result import Result
from trdb.kernels.backend import to_host
from trdb.kernels.sparse import dense
from trdb.optimizer.common_subplans import sharing_projections
from trdb.optimizer.rules.kernel_fusion import wide_product_sums
from trdb.parser import ast
from trdb.pipeline.plan_memo import PlanMemo
from trdb.pipeline.step_program import StepProgram, StepRecording, run_program
from trdb.plan import logical as lp
from trdb.plan.types import Column, ScalarType
from trdb.statements.adam_moments import AdamState
from trdb.statements.context import StatementContext
from trdb.statements.parameter_stacks import full_gradient, gradient_stack, positions_in, stored_stack
from trdb.statements.step_writes import Written, finish_writes, replace_stack, replace_tiles, tiles_by_key
from trdb.storage.adam_state import read_adam_steps
from trdb.storage.tensor_meta import TensorMeta

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


def _update(sc: StatementContext, param: TensorMeta, rows: list[tuple], options: Options,
            adam: AdamState | None) -> list[Written]:
    stacked = _stacked_update(sc, param, rows, options, adam)
    if stacked is not None:
        return stacked
    keys = [tuple(row[:-1]) for row in rows]
    grads = [dense(to_host(row[-1])) for row in rows]
    current = tiles_by_key(sc, param)
    # the gradient covers the parameter's whole shape: a present tile the loss does not reach has a zero
    # gradient, which still moves it under Adam (its moments decay), as PyTorch steps a whole parameter
    missing = sorted(set(current) - set(keys))
    keys += missing
    grads += [np.zeros(current[key].shape, dtype=grads[0].dtype if grads else param.dtype) for key in missing]
    writes: list[Written] = []
    if adam is not None:
        directions = adam.direction(keys, [np.asarray(g, dtype=_adam_dtype(param)) for g in grads], options, writes)
    else:
        directions = [sgd_direction(g, param.dtype) for g in grads]
    # in key order: the new tiles lie so in one buffer, which the next step's product reads as the whole
    # parameter without a copy (storage/whole_tensor.py)
    stepped = sorted(((key, d) for key, d in zip(keys, directions) if key in current), key=lambda kd: kd[0])
    new = [_clamped(tile, options) for tile in
           sgd_stepped([current[key] for key, _ in stepped], options.learning_rate, [d for _, d in stepped])]
    writes.append(replace_tiles(sc, param, [key for key, _ in stepped], new, set(current) <= set(keys)))
    return writes


def _adam_dtype(param: TensorMeta) -> np.dtype:
    """Adam's arithmetic runs in a float parameter's precision, which its moments are stored in (as torch.optim.Adam
    steps a float32 parameter in float32: in float64, the embeddings' step took 0.44 s of 2.7, in float32 0.16 s)."""
    return param.dtype if param.dtype in (np.float32, np.float64) else np.dtype(np.float64)


def _stacked_update(sc: StatementContext, param: TensorMeta, rows, options: Options,
                    adam: AdamState | None) -> Optional[list[Written]]:
    """`_update` of a parameter whose tiles are one stack and whose gradient is one under its keys
    (statements/parameter_stacks.py): whole-array arithmetic and stacked writes; None where it is not so."""
    current = stored_stack(*sc.catalog.tiles(param))
    gradient = gradient_stack(rows, len(param.keys)) if current is not None else None
    if gradient is None or gradient.tiles.shape[1:] != current.tiles.shape[1:]:
        return None
    positions = positions_in(gradient, current, param)
    if positions is None:
        return None
    writes: list[Written] = []
    if adam is not None:
        direction = adam.stacked_direction(current.keys, full_gradient(gradient, positions, len(current.keys),
                                                                      _adam_dtype(param)), options, writes)
        if direction is None:
            return None
    else:  # in the parameter's precision where the gradient has it, as `sgd_direction`
        dtype = sgd_direction(gradient.tiles[:0], param.dtype).dtype
        direction = full_gradient(gradient, positions, len(current.keys), dtype)
    new = np.multiply(direction, -options.learning_rate)  # the same values as `sgd_stepped`
    new += current.tiles
    _clamped(new, options)
    writes.append(replace_stack(sc, param, current.keys, new, True))
    return writes


def step_plans(sc: StatementContext, node: ast.Minimize) -> tuple[lp.Plan, list[TensorMeta], list[lp.Plan]]:
    """The plans of one step: the loss, then each parameter's gradient; expanded, so that what they share
    (the forward pass) is seen before the first of them runs."""
    params = [sc.catalog.require_tensor(name) for name in node.params]

    def bind() -> list[lp.Plan]:
        binder = sc.binder()
        loss = sc.pipeline.expand(binder.bind_table(ast.TableRef(node.view, span=node.span)), dense=False)
        gradients = [wide_product_sums(sc.pipeline.expand(binder.bind_grad(ast.GradRef(node.view, p.name,
                                                                                      span=node.span))))
                     for p in params]
        summed = loss_from_terms(loss)  # the loss summed from the terms the gradients compute beside their derivatives
        plans = sharing_projections([summed, *gradients])
        return plans if summed is loss or sums_gradient_terms(plans[0]) else sharing_projections([loss, *gradients])
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
    plans = _StepPlans(loss_plan, gradients, sc.pipeline.memo.program(loss_plan))
    adams: list = [None] * len(params)
    rows = []
    for first in range(1, options.steps + 1, options.commit_every):
        last = min(first + options.commit_every, options.steps + 1)
        with step_transaction():  # `commit_every` steps, committed together
            if options.optimizer == "adam" and adams[0] is None:
                names = [p.name for p in params]
                steps = sc.catalog.remembered_adam_steps(names)  # a training loop's last statement wrote them
                steps = read_adam_steps(sc.db, names) if steps is None else steps
                adams = [AdamState(sc, p, steps.get(p.name)) for p in params]
            losses = [_step(sc, plans, params, options, adams) for _ in range(first, last)]
        for step, loss in zip(range(first, last), losses):
            rows.append((step, loss))
            if (listener := STEP_LISTENER.get()) is not None:
                listener(step, options.steps, loss)
    schema = (Column("step", ScalarType(int)), Column("loss", ScalarType(float)))
    return Result(rows=rows, schema=schema, rowcount=len(rows))


@dataclass
class _StepPlans:
    """A step's logical plans, and the physical plans the last step ran as a program (None: none yet)."""

    loss: lp.Plan
    gradients: list[lp.Plan]
    program: Optional[StepProgram] = None


def _step(sc: StatementContext, plans: _StepPlans, params: list[TensorMeta], options: Options,
          adams: list) -> float:
    """One step: the loss and every gradient at the same parameter values, then the parameters (and Adam's
    state) written; the loss before the step."""
    loss, *results = _loss_and_gradients(sc, plans)
    writes = [write for param, grad_rows, adam in zip(params, results, adams)
              for write in _update(sc, sc.catalog.require_tensor(param.name), grad_rows, options, adam)]
    counted = [adam for adam in adams if adam is not None]
    finish_writes(sc, writes, {adam.param_name: adam.step for adam in counted})
    if counted:
        sc.catalog.remember_adam_steps({adam.param_name: adam.step for adam in counted})
    sc.pipeline.end_step()  # this step's forward pass is not read again: its tuples (and Ray workers' copies) go now
    return float(np.sum([np.asarray(to_host(r[-1]), dtype=np.float64) for r in loss]))


def _loss_and_gradients(sc: StatementContext, plans: _StepPlans) -> list:
    """The tuples of the loss and of each gradient, at the same parameter values: the last step's program run
    again where it still fits (pipeline/step_program.py), else planned (and recorded for the next step)."""
    if plans.program is not None:
        results = run_program(sc.pipeline, plans.program)
        if results is not None:
            return results
        sc.pipeline.discard_shared()  # the tuples its first runs made: the step starts over
    recording = sc.pipeline.recording = StepRecording()
    try:
        shared = sc.shared_work()  # the forward pass is computed once for the loss and every gradient
        shared.expect([plans.loss, *plans.gradients])
        results = [sc.run_plan(plans.loss, shared).rows]
        recording.mark_result()
        for plan in plans.gradients:  # a zero gradient still moves Adam's moments, so none is dropped
            results.append(sc.run_plan(plan, shared, keep_zero_tuples=True).rows)
            recording.mark_result()
    finally:
        sc.pipeline.recording = None
    plans.program = recording.program()
    sc.pipeline.memo.keep_program(plans.loss, plans.program)  # for this connection's next MINIMIZE of the view
    return results
