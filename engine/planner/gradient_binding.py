"""GRAD in FROM bound: the loss view and the parameter checked, the gradient's columns (a logical `Gradient`)."""
from __future__ import annotations

from trdb.errors import Error, ProgrammingError
from trdb.plan import logical as lp
from trdb.plan.types import KEY, Column, TensorType
from trdb.storage.tensor_meta import TensorMeta


def loss_column(loss: lp.Plan) -> int:
    """The position of the loss's one 0-d (or one-element) tensor column; an error when it has none or more."""
    tensors = [i for i, c in enumerate(loss.schema) if c.is_tensor]
    if len(tensors) != 1 or any(n != 1 for n in loss.schema[tensors[0]].type.tile):
        shapes = ", ".join(str(loss.schema[i].type) for i in tensors) or "none"
        raise ProgrammingError(f"GRAD: the loss must give one 0-d (or one-element) tensor column; it gives {shapes}",
                               hint="end the loss view with SELECT SUM(...) AS loss FROM ...")
    return tensors[0]


def gradient_schema(param: TensorMeta) -> tuple[Column, ...]:
    """A gradient is keyed and tiled like its parameter."""
    value = TensorType(param.dtype, param.tile, param.shape)
    return tuple(Column(k, KEY) for k in param.keys) + (Column(param.value_name, value),)


def bind_gradient(binder, item, loss: lp.Plan, param: TensorMeta) -> lp.Gradient:
    """d(sum of the loss's tuples) / d param, bound; autodiff builds its plan later."""
    span = item.span
    position = lp.SourcePosition(binder.ctx.text, span.line if span else None, span.column if span else None)
    try:
        loss_column(loss)
        check_differentiable(param)
    except Error as exc:
        raise exc.at(position.text, position.line, position.column)
    return lp.Gradient(loss, param, gradient_schema(param), position)


def check_differentiable(param: TensorMeta) -> None:
    """Only a float tensor has a gradient: a bool has no slope, and an integer tensor's gradient would be
    truncated to integers (d mean / dW of 12 elements, 1/12, became 0) and could take no fractional step;
    PyTorch and JAX refuse both too."""
    if param.dtype.kind == "f":
        return
    what = "which has no gradient" if param.dtype.kind == "b" else "an integer dtype: its gradient would be " \
                                                                    "truncated to integers"
    raise ProgrammingError(f"GRAD: {param.name} has dtype {param.dtype}, {what}",
                           hint=f"store it as a float tensor (CAST({param.name}.{param.value_name} AS float32)) "
                                "and differentiate with respect to that")
