"""Kernel functions and operators against numpy as the oracle: values, dtypes, shapes and errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from trdb.catalog.functions import NOT_CONST, OPERATORS, Arg, lookup_function
from trdb.kernels import functions as K
from trdb.kernels.numpy_backend import NUMPY_BACKEND

B = NUMPY_BACKEND
RNG = np.random.default_rng(7)
FLOATS = ["float32", "float64"]
NUMERIC = ["float32", "float64", "int32", "int64"]
SHAPES = [(), (5,), (4, 3), (2, 3, 4)]
LANGUAGE_FUNCTIONS = [
    "MATMUL", "MATRIX_MULTIPLY", "EINSUM", "TRANSPOSE", "RELU", "SIGMOID", "TANH", "EXP", "LOG",
    "SQRT", "ABS", "SQUARE", "POWER", "GREATEST", "LEAST", "SOFTMAX", "REDUCE_SUM", "REDUCE_MAX",
    "REDUCE_MEAN", "SUMSQ", "CAST", "ZEROS_LIKE", "ONES_LIKE", "BCE_WITH_LOGITS"]


def tile(shape, dtype="float32", low=-3.0, high=3.0):
    """Random read-only data: a kernel that wrote into its input would fail loudly."""
    if np.dtype(dtype).kind in "iu":
        a = RNG.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    elif np.dtype(dtype) == np.bool_:
        a = RNG.random(shape) < 0.5
    else:
        a = RNG.uniform(low, high, size=shape).astype(dtype)
    a = np.asarray(a)
    a.flags.writeable = False
    return a


def arg_of(value, const=False):
    """The Arg the binder would make for `value` (literals are constants, keys are not)."""
    if isinstance(value, np.ndarray):
        return Arg(value.shape, value.dtype)
    if const:
        return Arg(None, None, value)
    return Arg(None, np.asarray(value).dtype)


def tolerance(dtype):
    return {"float16": 1e-2, "float32": 2e-5}.get(np.dtype(dtype).name, 1e-12)


def run(fn, values, const_literals=True):
    """Call `fn`, and check that static inference agrees with what actually came out."""
    out = fn.call(B, values)
    args = [arg_of(v, const=const_literals or i in fn.const_positions)
            for i, v in enumerate(values)]
    inferred = fn.infer(args)
    if isinstance(out, np.ndarray):
        assert inferred.shape == out.shape, (fn.label, inferred, out.shape)
        assert inferred.dtype == out.dtype, (fn.label, inferred, out.dtype)
    else:
        assert inferred.shape is None and not isinstance(out, np.generic), (fn.label, out)
        assert inferred.const == out or (out != out and inferred.const != inferred.const)
    return out


def check(fn, values, expected, const_literals=True):
    out = run(fn, values, const_literals)
    expected = np.asarray(expected)
    if isinstance(out, np.ndarray):
        assert out.dtype == expected.dtype, (fn.label, out.dtype, expected.dtype)
    np.testing.assert_allclose(np.asarray(out, dtype=float), np.asarray(expected, dtype=float),
                               rtol=tolerance(expected.dtype), atol=tolerance(expected.dtype))


# ---- operators -------------------------------------------------------------------------------

BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
          "//": np.floor_divide, "%": np.remainder, "=": np.equal, "<>": np.not_equal,
          "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}


@pytest.mark.parametrize("symbol", sorted(BINARY))
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", SHAPES)
def test_binary_operators_match_numpy(symbol, dtype, shape):
    a, b = tile(shape, dtype), tile(shape, dtype, 1, 4)  # b > 0: no division by zero
    check(OPERATORS[symbol], [a, b], BINARY[symbol](a, b))


@pytest.mark.parametrize("symbol", sorted(BINARY))
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_operators_broadcast_scalars_weakly(symbol, dtype, scalar):
    a = tile((4, 3), dtype)
    fn = OPERATORS[symbol]
    check(fn, [a, scalar], BINARY[symbol](a, scalar))
    check(fn, [scalar, a + 5], BINARY[symbol](scalar, a + 5))
    check(fn, [a, scalar], BINARY[symbol](a, scalar), const_literals=False)


def test_numpy2_promotion_rules():
    f32 = np.dtype("float32")
    assert OPERATORS["*"].infer([Arg((4, 3), f32), Arg(None, None, 2.5)]).dtype == f32
    i32 = np.dtype("int32")
    assert OPERATORS["/"].infer([Arg((4,), i32), Arg((4,), i32)]).dtype == np.float64
    assert OPERATORS["+"].infer([Arg((4,), i32), Arg((4,), np.dtype("int64"))]).dtype == np.int64
    assert OPERATORS["<"].infer([Arg((4,), f32), Arg(None, None, 1)]).dtype == np.bool_
    # A 0-d tensor is strong, a Python scalar is weak.
    assert OPERATORS["+"].infer([Arg((4,), f32), Arg((), np.dtype("float64"))]).dtype == np.float64
    assert OPERATORS["+"].infer([Arg((4,), f32), Arg(None, np.dtype("float64"))]).dtype == f32


@pytest.mark.parametrize("shapes", [((4, 3), (3,)), ((4, 1), (1, 3)), ((2, 1, 4), (3, 1)),
                                    ((), (2, 3)), ((5,), ())])
def test_operators_broadcast_tensors(shapes):
    a, b = tile(shapes[0]), tile(shapes[1])
    check(OPERATORS["+"], [a, b], a + b)
    check(OPERATORS["*"], [b, a], b * a)


def test_scalar_only_arithmetic_stays_python():
    assert run(OPERATORS["+"], [2, 3]) == 5 and type(OPERATORS["+"].call(B, [2, 3])) is int
    assert OPERATORS["/"].call(B, [7, 2]) == 3.5
    assert OPERATORS["//"].call(B, [-7, 2]) == -4 and OPERATORS["%"].call(B, [-7, 2]) == 1
    assert OPERATORS["NEG"].infer([Arg(None, None, 1)]).const == -1
    key = OPERATORS["+"].infer([Arg(None, np.dtype("int64")), Arg(None, None, 1)])
    assert key.shape is None and key.dtype == np.int64 and key.const is NOT_CONST
    # numpy scalars coming from a storage layer behave like Python scalars (weak).
    out = OPERATORS["*"].call(B, [tile((3,), "float32"), np.float64(2.0)])
    assert out.dtype == np.float32


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", SHAPES)
def test_unary_minus(dtype, shape):
    a = tile(shape, dtype)
    check(OPERATORS["NEG"], [a], -a)


# ---- elementwise functions -------------------------------------------------------------------

UNARY = {
    "RELU": lambda a: np.maximum(a, 0),
    "SIGMOID": lambda a: 1 / (1 + np.exp(-a)),
    "TANH": np.tanh, "EXP": np.exp, "ABS": np.abs, "SQUARE": np.square,
    "LOG": np.log, "SQRT": np.sqrt,
    "ZEROS_LIKE": np.zeros_like, "ONES_LIKE": np.ones_like,
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", NUMERIC + ["float16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_unary_functions_match_numpy(name, dtype, shape):
    positive = name in ("LOG", "SQRT")
    a = tile(shape, dtype, 1 if positive else -3, 5 if positive else 3)
    check(lookup_function(name), [a], UNARY[name](a))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_of_scalars(name):
    out = run(lookup_function(name), [2.0])
    assert isinstance(out, float) and out == pytest.approx(float(UNARY[name](2.0)))


def test_sigmoid_is_stable_and_precise():
    a = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = lookup_function("SIGMOID").call(B, [a])
    assert out.dtype == np.float32 and np.all(np.isfinite(out))
    assert out[0] == 0 and out[2] == 0.5 and out[4] == 1
    assert out[1] == pytest.approx(np.exp(-50.0), rel=1e-5)  # no cancellation for tiny values


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_written_into_a_temporary_has_the_kernels_bits(dtype):
    from trdb.execution.tile_math.inplace import _sigmoid
    a = (np.random.default_rng(4).standard_normal(4096) * 40).astype(dtype)
    a[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1000.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = lookup_function("SIGMOID").call(B, [a])
        out = _sigmoid(B, a.copy(), np.dtype(dtype))
    assert out.dtype == dtype and np.array_equal(out, expected, equal_nan=True)


def test_log_of_zero_is_minus_inf_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = lookup_function("LOG").call(B, [np.zeros(3, np.float32)])
    assert np.all(out == -np.inf)


BINARY_FUNCTIONS = {"GREATEST": np.maximum, "LEAST": np.minimum, "POWER": np.power}


@pytest.mark.parametrize("name", sorted(BINARY_FUNCTIONS))
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shapes", [((4, 3), (4, 3)), ((2, 3, 4), (4,)), ((), (3,)), ((5,), ())])
def test_binary_functions_match_numpy(name, dtype, shapes):
    a, b = tile(shapes[0], dtype, 0, 3), tile(shapes[1], dtype, 0, 3)
    check(lookup_function(name), [a, b], BINARY_FUNCTIONS[name](a, b))


@pytest.mark.parametrize("name", sorted(BINARY_FUNCTIONS))
@pytest.mark.parametrize("scalar", [2, 0.5])
def test_binary_functions_with_scalars(name, scalar):
    a = tile((4, 3), "float32", 0, 3)
    check(lookup_function(name), [a, scalar], BINARY_FUNCTIONS[name](a, scalar))
    check(lookup_function(name), [scalar, a], BINARY_FUNCTIONS[name](scalar, a))


def bce_oracle(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    p = 1 / (1 + np.exp(-x))
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_bce_with_logits(dtype, shape):
    x, y = tile(shape, dtype), tile(shape, dtype, 0, 1)
    out = run(lookup_function("BCE_WITH_LOGITS"), [x, y])
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, bce_oracle(x, y), rtol=1e-5, atol=1e-6)


def test_bce_with_logits_is_stable():
    x = np.array([-1000.0, 1000.0, 0.0], np.float32)
    y = np.array([0.0, 1.0, 1.0], np.float32)
    out = lookup_function("BCE_WITH_LOGITS").call(B, [x, y])
    np.testing.assert_allclose(out, [0.0, 0.0, np.log(2)], rtol=1e-6)
    moderate = np.array([-3.0, 2.0], np.float32)
    expected = bce_oracle(moderate, 1).astype(np.float32)
    check(lookup_function("BCE_WITH_LOGITS"), [moderate, 1], expected)


# ---- axis functions, reductions, casts -------------------------------------------------------

def softmax_oracle(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 3), 1), ((4, 3), 0), ((2, 3, 4), -1),
                                        ((2, 3, 4), 1)])
def test_softmax(dtype, shape, axis):
    a = tile(shape, dtype)
    check(lookup_function("SOFTMAX"), [a, axis], softmax_oracle(a, axis))


def test_softmax_is_stable_and_defaults_to_last_axis():
    a = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], np.float32)
    out = lookup_function("SOFTMAX").call(B, [a])
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.0, 1.0]])


REDUCTIONS = {"REDUCE_SUM": np.sum, "REDUCE_MAX": np.max, "REDUCE_MEAN": np.mean}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape", SHAPES)
def test_reductions_without_axis_give_0d(name, dtype, shape):
    a = tile(shape, dtype)
    out = run(lookup_function(name), [a])
    assert isinstance(out, np.ndarray) and out.shape == ()
    check(lookup_function(name), [a], REDUCTIONS[name](a))


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 3), 1), ((4, 3), -2), ((2, 3, 4), 1)])
def test_reductions_along_axis(name, dtype, shape, axis):
    a = tile(shape, dtype)
    check(lookup_function(name), [a, axis], REDUCTIONS[name](a, axis=axis))


@pytest.mark.parametrize("dtype", NUMERIC + ["float16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_sumsq(dtype, shape):
    a = tile(shape, dtype)
    out = run(lookup_function("SUMSQ"), [a])
    assert out.shape == ()
    check(lookup_function("SUMSQ"), [a], np.sum(a * a))


@pytest.mark.parametrize("source", NUMERIC + ["bool"])
@pytest.mark.parametrize("target", ["float32", "float64", "int32", "int64", "bool", "float16"])
def test_cast(source, target):
    a = tile((4, 3), source)
    check(lookup_function("CAST"), [a, target], a.astype(target))


def test_cast_accepts_sql_spellings_and_makes_scalars_tensors():
    a = tile((3,), "float32")
    assert lookup_function("CAST").call(B, [a, "DOUBLE"]).dtype == np.float64
    out = run(lookup_function("CAST"), [2, "float32"])
    assert out.shape == () and out.dtype == np.float32


@pytest.mark.parametrize("shape,axes", [((4, 3), ()), ((2, 3, 4), ()), ((2, 3, 4), (1, 0, 2)),
                                        ((2, 3, 4), (-1, 0, 1)), ((5,), (0,)), ((), ())])
def test_transpose(shape, axes):
    a = tile(shape)
    check(lookup_function("TRANSPOSE"), [a, *axes], np.transpose(a, axes or None))


# ---- contractions ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("shapes", [((4, 3), (3, 5)), ((3,), (3,)), ((3,), (3, 5)), ((4, 3), (3,)),
                                    ((2, 4, 3), (3, 5)), ((2, 4, 3), (2, 3, 5)),
                                    ((2, 1, 4, 3), (5, 3, 2)), ((44, 8), (8, 32))])
def test_matmul(dtype, shapes):
    a, b = tile(shapes[0], dtype), tile(shapes[1], dtype)
    check(lookup_function("MATMUL"), [a, b], np.matmul(a, b))


@pytest.mark.parametrize("spec,shapes", [
    ("ij,jk->ik", [(4, 3), (3, 5)]), ("ij->ji", [(4, 3)]), ("ij->i", [(4, 3)]),
    ("ii->i", [(3, 3)]), ("ij,ij->ij", [(4, 3), (4, 3)]), ("i,j->ij", [(3,), (4,)]),
    ("bij,bjk->bik", [(2, 4, 3), (2, 3, 5)]), ("ij,jk,kl->il", [(4, 3), (3, 5), (5, 2)]),
    ("ij", [(4, 3)]), ("ij,jk", [(4, 3), (3, 5)]), ("ij->", [(4, 3)]),
    (" i j , j k -> i k ", [(2, 3), (3, 2)]),
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_einsum(spec, shapes, dtype):
    operands = [tile(s, dtype) for s in shapes]
    check(lookup_function("EINSUM"), [spec, *operands], np.einsum(spec, *operands))


def test_einsum_with_a_scalar_operand_keeps_the_dtype():
    a = tile((4, 3), "float32")
    check(lookup_function("EINSUM"), ["ij,->ij", a, 2.0], (a * 2.0).astype(np.float32))


def test_inputs_are_never_written():
    a, b = tile((4, 3)), tile((3, 4))
    before = a.copy(), b.copy()
    for name in LANGUAGE_FUNCTIONS:
        fn = lookup_function(name)
        args = {"MATMUL": [a, b], "MATRIX_MULTIPLY": [a, b], "EINSUM": ["ij,jk->ik", a, b],
                "CAST": [a, "float64"], "SOFTMAX": [a, 0]}.get(name)
        if args is None:
            args = [a] if fn.min_args == 1 else [a, a]
        fn.call(B, args)
    np.testing.assert_array_equal(a, before[0])
    np.testing.assert_array_equal(b, before[1])


@pytest.mark.parametrize("left, right", [(np.float32, np.float32), (np.float32, np.int64), (np.bool_, np.bool_),
                                         (np.float64, np.float16)])
def test_an_outer_product_matmul_is_numpys_matmul(left, right):
    """MATMUL with an inner dimension of 1 is computed as a broadcast multiplication: the same values and dtype."""
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((5, 1)) * 3).astype(left)
    b = (rng.standard_normal((1, 4)) * 3).astype(right)
    got, expected = K.matmul(np, a, b), np.matmul(a, b)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("rows, inner, columns", [(1433, 300, 16), (600, 50, 7), (1024, 64, 8)])
def test_a_transposed_view_times_few_columns_is_numpys_matmul(dtype, rows, inner, columns):
    """Xᵀ·G with G narrow is computed as (Gᵀ·X)ᵀ: the same values, dtype and shape, into `out` too."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((inner, rows)) * 3).astype(dtype)
    g = (rng.standard_normal((inner, columns)) * 3).astype(dtype)
    assert K._tall_transposed_times_narrow(x.T, g)  # the swapped path
    expected = np.matmul(x.T, g)
    got = K.matmul(np, x.T, g)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)
    out = np.full(expected.shape, -1, expected.dtype)
    K.matmul(np, x.T, g, out=out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-3)
