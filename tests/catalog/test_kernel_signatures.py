"""Kernel signatures: static errors, run-time shape errors, the registry, FLOPs and the backends."""
from __future__ import annotations

import numpy as np
import pytest

from trdb.catalog.functions import (
    OPERATORS,
    Arg,
    KernelFunction,
    KernelSignatureError,
    function_names,
    is_aggregate,
    lookup_function,
)
from trdb.errors import DataError, NotSupportedError
from trdb.kernels.cupy_backend import CUPY_BACKEND, out_of_device_memory
from trdb.kernels.numpy_backend import NUMPY_BACKEND

B = NUMPY_BACKEND
RNG = np.random.default_rng(11)
LANGUAGE_FUNCTIONS = [
    "MATMUL", "MATRIX_MULTIPLY", "EINSUM", "TRANSPOSE", "RELU", "SIGMOID", "TANH", "EXP", "LOG",
    "SQRT", "ABS", "SQUARE", "POWER", "GREATEST", "LEAST", "SOFTMAX", "REDUCE_SUM", "REDUCE_MAX",
    "REDUCE_MEAN", "SUMSQ", "CAST", "ZEROS_LIKE", "ONES_LIKE", "BCE_WITH_LOGITS"]


def tile(shape, dtype="float32"):
    a = RNG.uniform(-3, 3, size=shape).astype(dtype)
    a.flags.writeable = False
    return a


# ---- static errors: each names the function and the shapes ---------------------------------

F32, I64, BOOL = np.dtype("float32"), np.dtype("int64"), np.dtype("bool")


def t(*shape, dtype=F32):
    return Arg(tuple(shape), dtype)


def c(value):
    return Arg(None, None, value)


STATIC_ERRORS = [
    ("MATMUL", [t(128, 64), t(32, 32)],
     "MATMUL: shapes (128, 64) and (32, 32) do not align (64 != 32)"),
    ("+", [t(4, 3), t(5, 3)], "operator +: shapes (4, 3) and (5, 3) do not broadcast"),
    ("MATMUL", [t(2, 4, 3), t(5, 3, 2)],
     "MATMUL: shapes (2, 4, 3) and (5, 3, 2): batch dimensions (2,) and (5,)"),
    ("MATMUL", [Arg(None, F32), t(3, 3)], "MATMUL: shapes scalar and (3, 3): both operands"),
    ("MATMUL", [t(), t(3, 3)], "MATMUL: shapes () and (3, 3)"),
    ("MATMUL", [t(3, 3)], "MATMUL: expects 2 arguments, got 1 (shape (3, 3))"),
    ("GREATEST", [t(4, 3), t(2, 3)], "GREATEST: shapes (4, 3) and (2, 3) do not broadcast"),
    ("BCE_WITH_LOGITS", [t(4,), t(5,)], "BCE_WITH_LOGITS: shapes (4,) and (5,) do not broadcast"),
    ("RELU", [t(4,), t(4,)], "RELU: expects 1 argument, got 2 (shapes (4,) and (4,))"),
    ("SOFTMAX", [t(4, 3), c(2)], "SOFTMAX: axis 2 is out of range for shape (4, 3)"),
    ("SOFTMAX", [t(4, 3), Arg(None, I64)],
     "SOFTMAX: argument 2 must be a constant, got a run-time value (shape (4, 3))"),
    ("SOFTMAX", [t(4, 3), t(3)],
     "SOFTMAX: argument 2 must be a constant, got a tensor (shape (4, 3))"),
    ("SOFTMAX", [t(4, 3), c(1.5)],
     "SOFTMAX: axis must be an integer constant, got 1.5 (shape (4, 3))"),
    ("SOFTMAX", [t()], "SOFTMAX: needs a tensor of at least 1 dimension, got shape ()"),
    ("REDUCE_SUM", [t(4, 3), c(-3)], "REDUCE_SUM: axis -3 is out of range for shape (4, 3)"),
    ("REDUCE_MAX", [t(4, 3), c(0), c(1)], "REDUCE_MAX: expects 1 to 2 arguments, got 3"),
    ("TRANSPOSE", [t(2, 3, 4), c(0), c(0), c(1)],
     "TRANSPOSE: axes (0, 0, 1) are not a permutation of the 3 axes of shape (2, 3, 4)"),
    ("TRANSPOSE", [t(2, 3, 4), c(0), c(1)], "TRANSPOSE: axes (0, 1) are not a permutation"),
    ("TRANSPOSE", [t(2, 3), c(0), c(2)], "TRANSPOSE: axis 2 is out of range for shape (2, 3)"),
    ("CAST", [t(4, 3), c("bfloat16")], "CAST: dtype bfloat16 is not supported on the CPU backend"),
    ("CAST", [t(4, 3), c("float7")],
     "CAST: unknown dtype 'float7' (shape (4, 3)); expected one of bool, float16"),
    ("CAST", [t(4, 3), Arg(None, I64)], "CAST: argument 2 must be a constant"),
    ("EINSUM", [c("ij,jk->ik"), t(4, 3), t(4, 5)],
     "EINSUM: spec 'ij,jk->ik': letter 'j' is 3 in operand 1 and 4 in operand 2 (only a size of 1 broadcasts) "
     "(shapes (4, 3) and (4, 5))"),
    ("EINSUM", [c("ij,jk->ik"), t(4, 3)],
     "EINSUM: spec 'ij,jk->ik': it has 2 operand terms but 1 operands were given (shape (4, 3))"),
    ("EINSUM", [c("ijk->i"), t(4, 3)],
     "EINSUM: spec 'ijk->i': operand 1 term 'ijk' has 3 letters but the operand has 2 dimensions (shape (4, 3))"),
    ("EINSUM", [c("ij->iz"), t(4, 3)],
     "EINSUM: spec 'ij->iz': the output uses 'z' that no operand has (shape (4, 3))"),
    ("EINSUM", [c("ij->ii"), t(4, 3)], "EINSUM: spec 'ij->ii': the output repeats 'i'"),
    ("EINSUM", [c("i2->i"), t(4, 3)], "EINSUM: spec 'i2->i': unexpected character '2' in operand 1"),
    ("EINSUM", [c("...i->i"), t(4, 3)],
     "EINSUM: spec '...i->i': the operands have 1 axes under '...' but the output has no '...'"),
    ("EINSUM", [c("ii->i"), t(4, 3)],
     "EINSUM: spec 'ii->i': letter 'i' is 4 and 3 within operand 1"),
    ("EINSUM", [Arg(None, I64), t(4, 3)],
     "EINSUM: argument 1 must be a constant, got a run-time value (shape (4, 3))"),
    ("EINSUM", [c("ij")], "EINSUM: expects at least 2 arguments, got 1"),
    ("NEG", [t(4, 3, dtype=BOOL)], "operator -: not supported for dtypes (bool) with shape (4, 3)"),
    ("-", [t(3, dtype=BOOL), t(3, dtype=BOOL)],
     "operator -: not supported for dtypes (bool, bool) with shapes (3,) and (3,)"),
    ("+", [t(3, dtype=np.dtype("int32")), c(2 ** 40)],
     "operator +: not supported for dtypes (int32, scalar int) with shapes (3,) and scalar: Python integer"),
    ("POWER", [t(3, dtype=I64), c(-1)],
     "POWER: not supported for dtypes (int64, scalar int) with shapes (3,) and scalar: Integers to negative"),
]


@pytest.mark.parametrize("name,args,message", STATIC_ERRORS)
def test_static_errors_name_the_function_and_shapes(name, args, message):
    fn = OPERATORS.get(name) or lookup_function(name)
    with pytest.raises(KernelSignatureError) as info:
        fn.infer(args)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.function == fn.label


# ---- run time: actual tile shapes ------------------------------------------------------------

def test_edge_tiles_follow_the_same_rules():
    fn = lookup_function("MATMUL")
    assert fn.infer([t(64, 8), t(8, 32)]).shape == (64, 32)
    assert fn.call(B, [tile((44, 8)), tile((8, 32))]).shape == (44, 32)
    assert OPERATORS["+"].call(B, [tile((44, 8)), tile((1, 8))]).shape == (44, 8)


RUNTIME_ERRORS = [
    ("MATMUL", [(44, 8), (16, 32)], "MATMUL: shapes (44, 8) and (16, 32) do not align (8 != 16)"),
    ("+", [(44, 8), (64, 8)], "operator +: shapes (44, 8) and (64, 8) do not broadcast"),
    ("LEAST", [(3,), (4,)], "LEAST: shapes (3,) and (4,) do not broadcast"),
    ("BCE_WITH_LOGITS", [(4, 3), (3, 4)],
     "BCE_WITH_LOGITS: shapes (4, 3) and (3, 4) do not broadcast"),
]


@pytest.mark.parametrize("name,shapes,message", RUNTIME_ERRORS)
def test_runtime_shape_mismatch_is_a_data_error(name, shapes, message):
    fn = OPERATORS.get(name) or lookup_function(name)
    with pytest.raises(DataError) as info:
        fn.call(B, [tile(s) for s in shapes])
    assert str(info.value) == message


def test_runtime_errors_of_other_kinds():
    einsum_message = r"EINSUM: spec 'ij,jk->ik': letter 'j' .*\(shapes \(4, 3\) and \(4, 5\)\)"
    with pytest.raises(DataError, match=einsum_message):
        lookup_function("EINSUM").call(B, ["ij,jk->ik", tile((4, 3)), tile((4, 5))])
    with pytest.raises(DataError, match=r"SOFTMAX: axis 2 is out of range for shape \(4, 3\)"):
        lookup_function("SOFTMAX").call(B, [tile((4, 3)), 2])
    power_message = r"POWER: .*negative integer powers.*\(shapes \(3,\) and \(3,\)\)"
    with pytest.raises(DataError, match=power_message):
        lookup_function("POWER").call(B, [tile((3,), "int64"), np.array([1, -1, 2])])
    with pytest.raises(DataError, match=r"MATMUL: expects 2 arguments, got 1"):
        lookup_function("MATMUL").call(B, [tile((3, 3))])


def test_a_call_on_tiles_and_numbers_seen_before_runs_and_fails_as_the_first():
    # the second call takes the path for shapes and numbers already checked: same results, same errors
    from trdb.execution.work import _FLOPS_SEEN, kernel_work

    power, add = lookup_function("POWER"), OPERATORS["+"]
    ints = tile((3,), "int64")
    messages = []
    for _ in range(2):
        with pytest.raises(DataError) as info:
            power.call(B, [ints, -1])
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "negative integer powers" in messages[0]
    values = tile((4, 3))
    results = [add.call(B, [values, 2]), add.call(B, [values, 2]), add.call(B, [values, True])]
    np.testing.assert_array_equal(results[0], values + 2)
    np.testing.assert_array_equal(results[1], values + 2)
    np.testing.assert_array_equal(results[2], values + 1)
    _FLOPS_SEEN.clear()
    counts = [kernel_work(add, [values, 2], results[0]) for _ in range(2)]  # counted, then remembered
    assert counts[0] == counts[1] == (12, 2 * values.nbytes)


# ---- registry --------------------------------------------------------------------------------

def test_lookup_is_case_insensitive_and_resolves_aliases():
    matmul = lookup_function("MATMUL")
    assert lookup_function("matmul") is matmul and lookup_function("MatMul") is matmul
    assert lookup_function("matrix_multiply") is matmul
    assert lookup_function("MATMUL").name == "MATMUL"
    assert lookup_function("NO_SUCH_FUNCTION") is None
    assert lookup_function("SUM") is None  # aggregates are not kernels


def test_every_language_function_is_registered():
    names = function_names()
    for name in LANGUAGE_FUNCTIONS:
        assert name in names and isinstance(lookup_function(name), KernelFunction)
    assert sorted(OPERATORS) == sorted(["+", "-", "*", "/", "//", "%", "NEG",
                                        "=", "<>", "<", "<=", ">", ">="])


def test_aggregates():
    for name in ["SUM", "avg", "Min", "MAX", "count"]:
        assert is_aggregate(name)
    assert not is_aggregate("MATMUL") and not is_aggregate("REDUCE_SUM")


def test_signature_metadata():
    assert (lookup_function("MATMUL").min_args, lookup_function("MATMUL").max_args) == (2, 2)
    assert lookup_function("EINSUM").max_args is None
    assert lookup_function("EINSUM").const_positions == frozenset({0})
    assert lookup_function("SOFTMAX").const_positions == frozenset({1})
    assert lookup_function("CAST").const_positions == frozenset({1})
    assert 1 in lookup_function("TRANSPOSE").const_positions
    assert OPERATORS["NEG"].label == "operator -" and OPERATORS["+"].label == "operator +"


def test_flops():
    assert lookup_function("MATMUL").flops([(128, 64), (64, 32)]) == 2 * 128 * 64 * 32
    assert lookup_function("MATMUL").flops([(4, 128, 64), (64, 32)]) == 4 * 2 * 128 * 64 * 32
    assert OPERATORS["+"].flops([(256, 256), None]) == 256 * 256
    assert OPERATORS["*"].flops([(256, 1), (1, 256)]) == 256 * 256
    assert lookup_function("RELU").flops([(10, 10)]) == 100
    assert lookup_function("REDUCE_SUM").flops([(10, 10), None]) == 100
    einsum = lookup_function("EINSUM").flops([c("ij,jk->ik"), (64, 32), (32, 16)])
    assert einsum == pytest.approx(2 * 64 * 32 * 16, rel=0.01)


# ---- backends --------------------------------------------------------------------------------

def test_numpy_backend():
    assert B.name == "numpy" and B.xp is np and B.is_available()
    z = B.zeros((2, 3), np.float32)
    assert z.shape == (2, 3) and z.dtype == np.float32 and not z.any()
    a = B.asarray([1, 2], dtype=np.float64)
    assert isinstance(B.to_numpy(a), np.ndarray) and B.to_numpy(a).dtype == np.float64


def cupy_usable():
    return CUPY_BACKEND.is_available()


@pytest.mark.skipif(cupy_usable(), reason="cupy and a GPU are present")
def test_cupy_backend_reports_unavailable_without_gpu():
    assert CUPY_BACKEND.name == "cupy"
    assert not CUPY_BACKEND.is_available()
    assert CUPY_BACKEND.unavailable_reason()
    with pytest.raises(NotSupportedError, match="cupy backend is not available"):
        CUPY_BACKEND.xp


# CuPy's own classes, as their module names them (cupy is not installed where CI runs)
_CupyOutOfMemory = type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})
_CublasError = type("CUBLASError", (RuntimeError,), {"__module__": "cupy_backends.cuda.libs.cublas"})


def test_a_gpu_allocation_that_failed_is_an_operational_error():
    error = out_of_device_memory(_CupyOutOfMemory("Out of memory allocating 262,144 bytes"))
    assert "out of GPU memory: Out of memory allocating 262,144 bytes" in str(error)
    assert "gpu_memory_limit" in error.hint and "device = 'cpu'" in error.hint
    assert out_of_device_memory(_CublasError("CUBLAS_STATUS_ALLOC_FAILED")) is not None
    assert out_of_device_memory(_CublasError("CUBLAS_STATUS_EXECUTION_FAILED")) is None
    assert out_of_device_memory(MemoryError("the host's")) is None


def test_a_statement_that_runs_out_of_gpu_memory_fails_with_that_error_and_changes_nothing(con, monkeypatch):
    import trdb

    # tile products of 32 x 32 (small ones are one batched matmul of their stacks, not the kernel's calls)
    con.execute("CREATE TENSOR A FROM ? TILE (32, 32)", [np.ones((64, 64), np.float32)])
    con.execute("SET dense_einsum_bytes = 0")  # the product's MATMUL runs (not one whole EINSUM)

    def refused(xp, a, b, out=None):
        raise _CublasError("CUBLAS_STATUS_ALLOC_FAILED")
    monkeypatch.setattr(lookup_function("MATMUL"), "_impl", refused)
    with pytest.raises(trdb.OperationalError, match="out of GPU memory: CUBLAS_STATUS_ALLOC_FAILED"):
        con.execute("CREATE TENSOR C AS SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN A AS B "
                    "ON A.j = B.i GROUP BY A.i, B.j")
    monkeypatch.undo()
    assert "C" not in {row[0] for row in con.execute("SHOW TENSORS").fetchall()}


@pytest.mark.skipif(not cupy_usable(), reason="needs cupy and a CUDA device")
@pytest.mark.parametrize("name,args", [
    ("MATMUL", [(44, 8), (8, 32)]), ("SIGMOID", [(4, 3)]), ("SOFTMAX", [(4, 3)]),
    ("REDUCE_SUM", [(4, 3)]), ("SUMSQ", [(4, 3)]), ("BCE_WITH_LOGITS", [(4, 3), (4, 3)]),
    ("EINSUM", ["ij,jk,kl->il", (4, 3), (3, 5), (5, 2)]), ("+", [(4, 3), 2.5]),
])
def test_cupy_matches_numpy(name, args):
    fn = OPERATORS.get(name) or lookup_function(name)
    host = [tile(a) if isinstance(a, tuple) else a for a in args]
    device = [CUPY_BACKEND.asarray(h) if isinstance(h, np.ndarray) else h for h in host]
    expected = fn.call(B, host)
    out = CUPY_BACKEND.to_numpy(fn.call(CUPY_BACKEND, device))
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
