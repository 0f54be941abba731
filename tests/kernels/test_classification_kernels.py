"""LOG_SOFTMAX, CROSS_ENTROPY, ARGMAX and RESHAPE against numpy: values, dtypes, static shapes, errors, CuPy."""
from __future__ import annotations

import numpy as np
import pytest

import trdb
from trdb.autodiff import internal_kernels as ik
from trdb.catalog.functions import Arg, KernelSignatureError, lookup_function
from trdb.kernels.cupy_backend import CUPY_BACKEND
from trdb.kernels.numpy_backend import NUMPY_BACKEND

RNG = np.random.default_rng(11)


def tile(shape, dtype="float64", scale=3.0):
    a = (RNG.standard_normal(shape) * scale).astype(dtype)
    a.flags.writeable = False  # a kernel that wrote into its input would fail loudly
    return a


def np_log_softmax(x, axis):
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def run(name, values):
    """The kernel on numpy, with the binder's static shape and dtype checked against what came out."""
    fn = lookup_function(name)
    out = fn.call(NUMPY_BACKEND, values)
    args = [Arg(v.shape, v.dtype) if isinstance(v, np.ndarray) else Arg(None, None, v) for v in values]
    inferred = fn.infer(args)
    assert (inferred.shape, inferred.dtype) == (out.shape, out.dtype), (name, inferred, out.shape, out.dtype)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 6), 1), ((4, 6), 0), ((4, 6), -1), ((2, 3, 4), 1)])
def test_log_softmax_equals_numpy(shape, axis, dtype):
    x = tile(shape, dtype)
    got = run("LOG_SOFTMAX", [x, axis])
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, np_log_softmax(x, axis), rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5)


def test_log_softmax_without_an_axis_is_along_the_last_one():
    x = tile((3, 5))
    np.testing.assert_allclose(run("LOG_SOFTMAX", [x]), np_log_softmax(x, -1), rtol=1e-12)


def test_log_softmax_is_stable_where_log_of_softmax_is_not():
    x = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    got = run("LOG_SOFTMAX", [x, 1])
    np.testing.assert_allclose(got, [[0.0, -1000.0, -2000.0]], rtol=1e-6)
    with np.errstate(all="ignore"):
        naive = np.log(run("SOFTMAX", [x, 1]))
    assert np.isinf(naive).any()  # what LOG(SOFTMAX(x)) gives: the reason the kernel exists


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((6, 4), 1), ((6, 4), 0), ((2, 3, 5), -1)])
def test_cross_entropy_of_one_hot_and_probability_targets_equals_numpy(shape, axis, dtype):
    logits = tile(shape, dtype)
    n = shape[axis]
    labels = np.moveaxis(np.eye(n, dtype=dtype)[RNG.integers(0, n, np.delete(shape, axis % len(shape)))], -1, axis)
    probs = np.exp(np_log_softmax(tile(shape), axis)).astype(dtype)
    for target in (labels, probs):
        got = run("CROSS_ENTROPY", [logits, target, axis])
        expected = -(target * np_log_softmax(logits, axis)).sum(axis=axis)
        assert got.shape == expected.shape and got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, expected, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-5)


@pytest.mark.parametrize("logits_dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((6, 4), 1), ((6, 4), 0), ((2, 3, 5), -1), ((2, 3, 5), 1)])
def test_cross_entropy_of_integer_class_labels_equals_the_one_hot_target(shape, axis, logits_dtype):
    logits = tile(shape, "float64").astype(logits_dtype)
    n, rows = shape[axis], tuple(np.delete(shape, axis % len(shape)))
    for label_dtype in ("int64", "int32"):
        labels = RNG.integers(0, n, rows).astype(label_dtype)
        one_hot = np.moveaxis(np.eye(n)[labels], -1, axis)
        got = run("CROSS_ENTROPY", [logits, labels, axis])
        expected = run("CROSS_ENTROPY", [logits, one_hot.astype(logits.dtype), axis])
        assert got.shape == rows and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6 if logits_dtype == "float32" else 1e-12)


@pytest.mark.parametrize("labels", [[0, -1, 2], [4, 0, 0]])
def test_class_labels_outside_the_classes_are_a_data_error(labels):
    with pytest.raises(trdb.DataError, match=r"a class label is outside 0\.\.3"):
        lookup_function("CROSS_ENTROPY").call(NUMPY_BACKEND, [tile((3, 4)), np.array(labels), 1])


def test_cross_entropy_of_huge_logits_stays_finite():
    logits = np.array([[2000.0, -2000.0], [-2000.0, 2000.0]])
    got = run("CROSS_ENTROPY", [logits, np.array([[0.0, 1.0], [0.0, 1.0]]), 1])
    np.testing.assert_allclose(got, [4000.0, 0.0])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_argmax_is_int64_indices_as_numpy_gives(axis, dtype):
    x = tile((5, 7), "float64").astype(dtype)
    got = run("ARGMAX", [x] if axis is None else [x, axis])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.argmax(x, axis=axis))


@pytest.mark.parametrize("new_shape", [(2, 6), (12,), (3, -1), (-1, 2, 2), (1, 12, 1)])
def test_reshape_equals_numpy_in_both_spellings(new_shape):
    x = tile((4, 3), "float32")
    expected = x.reshape(new_shape)
    for args in ([x, new_shape], [x, *new_shape]):
        got = run("RESHAPE", args)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name,args,words", [
    ("RESHAPE", [(4, 3), (5, 3)], r"cannot reshape shape \(4, 3\) \(12 elements\) into \(5, 3\)"),
    ("RESHAPE", [(4, 3), (-1, -1)], "into"),
    ("RESHAPE", [(4, 3), (5, -1)], "into"),
    ("RESHAPE", [(4, 3), (2, "6")], "sizes >= 0"),
    ("RESHAPE", [(4, 3), (2, -2)], "sizes >= 0"),
    ("LOG_SOFTMAX", [(4, 3), 2], "axis 2 is out of range"),
    ("ARGMAX", [(4, 3), "x"], "axis must be an integer constant"),
    ("CROSS_ENTROPY", [(4, 3), (3,)], r"the target must have the logits' shape \(4, 3\) .* or the rows' shape \(4,\)"),
    ("CROSS_ENTROPY", [(4, 3), (4,)], "must be an integer tensor, got float32"),
    ("CROSS_ENTROPY", [(4, 3), (4, 3), -3], "axis -3 is out of range"),
])
def test_bad_arguments_are_refused_statically_with_a_hint(name, args, words):
    fn = lookup_function(name)
    first, rest = args[0], args[1:]
    arguments = [Arg(first, np.dtype("float32"))]
    if name == "CROSS_ENTROPY":
        arguments.append(Arg(rest[0], np.dtype("float32")))
        rest = rest[1:]
    arguments += [Arg(None, None, r) for r in rest]
    with pytest.raises(KernelSignatureError, match=words) as info:
        fn.infer(arguments)
    assert info.value.hint


def test_the_backward_kernels_equal_their_formulas():
    x, u = tile((4, 5)), tile((4, 5))
    out = np_log_softmax(x, 1)
    softmax = np.exp(out)
    np.testing.assert_allclose(ik.log_softmax_backward(np, out, u, 1), u - softmax * u.sum(1, keepdims=True),
                               rtol=1e-12)
    target, rows = np.abs(tile((4, 5))), tile((4,))
    np.testing.assert_allclose(ik.cross_entropy_backward(np, x, target, rows, 1),
                               (softmax * target.sum(1, keepdims=True) - target) * rows[:, None], rtol=1e-12)
    np.testing.assert_allclose(ik.cross_entropy_target_backward(np, x, rows, 1), -out * rows[:, None], rtol=1e-12)
    labels = np.array([4, 0, 2, 2])
    np.testing.assert_allclose(ik.cross_entropy_backward(np, x, labels, rows, 1),
                               (softmax - np.eye(5)[labels]) * rows[:, None], rtol=1e-12)
    np.testing.assert_array_equal(ik.reshape_like(np, u.reshape(2, 10), x), u)


# ---- through SQL: the caret under the call and the hint ------------------------------------------------------

@pytest.fixture
def xcur(cur):
    cur.execute("CREATE TENSOR X FROM ? TILE (3, 4) DTYPE float64", [np.arange(24.0).reshape(6, 4)])
    return cur


def test_the_new_kernels_run_in_a_query(xcur):
    X = np.arange(24.0).reshape(6, 4)
    rows = xcur.execute("SELECT X.i, LOG_SOFTMAX(X.v) AS ls, ARGMAX(X.v, 0) AS am, RESHAPE(X.v, (2, -1)) AS r, "
                        "CROSS_ENTROPY(X.v, SOFTMAX(X.v, 0), 0) AS ce FROM X ORDER BY X.i").fetchall()
    for key, ls, am, r, ce in rows:
        block = X[3 * key:3 * key + 3]
        np.testing.assert_allclose(ls, np_log_softmax(block, -1), rtol=1e-12)
        np.testing.assert_array_equal(am, np.argmax(block, 0))
        assert am.dtype == np.int64
        np.testing.assert_array_equal(r, block.reshape(2, 6))
        softmax = np.exp(np_log_softmax(block, 0))
        np.testing.assert_allclose(ce, -(softmax * np_log_softmax(block, 0)).sum(0), rtol=1e-12)


def test_arithmetic_on_their_fresh_results_may_run_in_place_and_gives_the_same_values(xcur):
    X = np.arange(24.0).reshape(6, 4)
    rows = xcur.execute("SELECT X.i, -LOG_SOFTMAX(X.v, 0) AS nls, CROSS_ENTROPY(X.v, X.v, 1) * 2 AS ce2, "
                        "ARGMAX(X.v, 1) + 1 AS am1, LOG_SOFTMAX(X.v) / 2 AS half FROM X ORDER BY X.i").fetchall()
    for key, nls, ce2, am1, half in rows:
        block = X[3 * key:3 * key + 3]
        np.testing.assert_allclose(nls, -np_log_softmax(block, 0), rtol=1e-12)
        np.testing.assert_allclose(ce2, -2 * (block * np_log_softmax(block, 1)).sum(1), rtol=1e-12)
        np.testing.assert_array_equal(am1, np.argmax(block, 1) + 1)
        assert am1.dtype == np.int64
        np.testing.assert_allclose(half, np_log_softmax(block, 1) / 2, rtol=1e-12)
    np.testing.assert_array_equal(xcur.execute("SELECT * FROM X").fetch_tensor(), X)  # its tiles untouched


@pytest.mark.parametrize("call,words,hint,at", [
    ("RESHAPE(X.v, (5, -1))", "RESHAPE: cannot reshape shape (3, 4) (12 elements) into (5, -1)", "product is 12", "RESHAPE"),
    ("RESHAPE(X.v, 5, 3)", "into (5, 3)", "product is 12", "RESHAPE"),
    ("RESHAPE(X.v, (2, 'a'))", "a tuple holds integer constants", "integer literals", "'a'"),
    ("LOG_SOFTMAX(X.v, 2)", "LOG_SOFTMAX: axis 2 is out of range for shape (3, 4)", "0 to 1", "LOG_SOFTMAX"),
    ("ARGMAX(X.v, 'rows')", "ARGMAX: axis must be an integer constant, got 'rows'", "integer literal", "ARGMAX"),
    ("CROSS_ENTROPY(X.v, REDUCE_SUM(X.v, 1), 1)", "holds class labels and must be an integer tensor, got float64",
     "CAST(target AS bigint)", "CROSS"),
    ("CROSS_ENTROPY(X.v, REDUCE_SUM(X.v, 0), 1)", "the target must have the logits' shape (3, 4)", "classes",
     "CROSS"),
    ("CROSS_ENTROPY(X.v, X.v, 'a')", "axis must be an integer constant", "integer literal", "CROSS"),
])
def test_bad_calls_show_a_caret_and_a_hint(xcur, call, words, hint, at):
    statement = f"SELECT X.i, {call} AS v FROM X"
    with pytest.raises(trdb.ProgrammingError) as info:
        xcur.execute(statement)
    text = str(info.value)
    assert words in text and hint in text.split("HINT: ")[1], text
    line, caret = text.split("\n")[1:3]
    assert line.endswith(statement) and caret.index("^") == line.index(at), text


def test_a_tuple_outside_a_function_call_is_refused(xcur):
    with pytest.raises(trdb.ProgrammingError, match=r"only allowed as a kernel function's argument"):
        xcur.execute("SELECT X.i, (1, 2) AS v FROM X")


def test_a_string_where_a_tile_goes_is_refused(xcur):
    with pytest.raises(trdb.ProgrammingError, match="LOG_SOFTMAX takes numbers"):
        xcur.execute("SELECT X.i, LOG_SOFTMAX('abc') AS v FROM X")


def test_a_reshape_that_misfits_an_edge_tile_is_a_data_error_with_a_hint(cur):
    cur.execute("CREATE TENSOR E FROM ? TILE (4, 4) DTYPE float64", [np.ones((6, 4))])  # an edge tile of 2 x 4
    with pytest.raises(trdb.DataError, match=r"cannot reshape shape \(2, 4\)") as info:
        cur.execute("SELECT E.i, RESHAPE(E.v, (2, 8)) AS v FROM E").fetchall()
    assert "product is 8" in str(info.value)
    flat = cur.execute("SELECT E.i, RESHAPE(E.v, (-1,)) AS v FROM E ORDER BY E.i").fetchall()
    assert [r[1].shape for r in flat] == [(16,), (8,)]


# ---- CuPy: the same kernels on the device against numpy ------------------------------------------------------

@pytest.mark.skipif(not CUPY_BACKEND.is_available(), reason="needs cupy and a CUDA device")
def test_the_kernels_on_cupy_equal_numpy():
    import cupy
    x, target, u = tile((8, 5), "float32"), np.eye(5, dtype=np.float32)[RNG.integers(0, 5, 8)], tile((8, 5))
    calls = [("LOG_SOFTMAX", [x, 1]), ("CROSS_ENTROPY", [x, target, 1]), ("ARGMAX", [x, 0]),
             ("RESHAPE", [x, (-1, 2)])]
    for name, args in calls:
        fn = lookup_function(name)
        device = [CUPY_BACKEND.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
        got = fn.call(CUPY_BACKEND, device)
        assert isinstance(got, cupy.ndarray)
        expected = fn.call(NUMPY_BACKEND, args)
        assert got.dtype == expected.dtype
        np.testing.assert_allclose(cupy.asnumpy(got), expected, rtol=1e-5, atol=1e-6)
    rows = tile((8,), "float32")
    for kernel, args in ((ik.log_softmax_backward, (x, u.astype(np.float32), 1)),
                         (ik.cross_entropy_backward, (x, target, rows, 1)),
                         (ik.cross_entropy_target_backward, (x, rows, 1))):
        got = kernel(cupy, *(cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args))
        np.testing.assert_allclose(cupy.asnumpy(got), kernel(np, *args), rtol=1e-5, atol=1e-6)
