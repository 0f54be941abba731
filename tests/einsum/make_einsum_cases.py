"""Builds einsum_cases.json: the einsum expressions of numpy's and opt_einsum's own test suites.

Run as `python tests/einsum/make_einsum_cases.py NUMPY_REPO OPT_EINSUM_REPO` with git checkouts of
github.com/numpy/numpy and github.com/dgasmith/opt_einsum. numpy's numpy/_core/tests/test_einsum.py
is run under pytest with numpy.einsum and numpy.einsum_path wrapped to record every (spec, operand
shapes) they are called with (the sublist form, `einsum(a, [0, 1], b, [1, 2])`, written as the spec
it stands for); opt_einsum's opt_einsum/tests/test_contract.py lists its expressions in `tests`,
with operand shapes from its opt_einsum/testing.py size table, as its own tests build them. Sizes
are mapped, per case, onto 2, 3, 4, ... in order (0 and 1 kept): the same letters agree, the same
broadcasts happen, numpy accepts and refuses the same cases, and every case stays small. Calls that
differ only in spaces, in the letters chosen or in sizes other than 0 and 1 are one case (the first
one found); a case both suites have is named by both ("numpy+opt_einsum").
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

NUMPY_TESTS = "numpy/_core/tests/test_einsum.py"
OPT_EINSUM_TESTS = "opt_einsum/tests/test_contract.py"
OPT_EINSUM_SIZES = "opt_einsum/testing.py"
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
OUT = Path(__file__).with_name("einsum_cases.json")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def sublist_spec(args: list):
    """The spec of numpy's sublist form (operand, axes, operand, axes, ..., [output axes]), or None."""
    operands, terms = [], []
    while len(args) >= 2:
        operands.append(args.pop(0))
        terms.append(args.pop(0))
    try:
        text = ["".join("..." if x is Ellipsis else LETTERS[int(x)] for x in t) for t in terms + args[:1]]
    except (TypeError, ValueError, IndexError):
        return None, None
    return ",".join(text[:len(terms)]) + ("->" + text[-1] if args else ""), operands


def record_numpy(test_file: str) -> list:
    import pytest

    calls = []

    def wrap(original):
        def recording(*args, **kwargs):
            if args and isinstance(args[0], str):
                spec, operands = args[0], list(args[1:])
            else:
                spec, operands = sublist_spec(list(args))
            try:
                shapes = [list(np.shape(o)) for o in operands] if spec is not None else None
            except (ValueError, TypeError):
                shapes = None
            if shapes is not None:
                calls.append((spec, shapes))
            return original(*args, **kwargs)
        return recording

    originals = np.einsum, np.einsum_path
    np.einsum, np.einsum_path = wrap(np.einsum), wrap(np.einsum_path)
    folder = Path(test_file).parent
    (folder / "pytest.ini").write_text("[pytest]\n")  # not this repository's configuration
    pytest.main(["-q", "-p", "no:cacheprovider", "-W", "ignore", "--rootdir", str(folder),
                 "-c", str(folder / "pytest.ini"), test_file])
    np.einsum, np.einsum_path = originals
    return list({(spec, json.dumps(shapes)): (spec, shapes) for spec, shapes in calls}.values())


def opt_einsum_cases(repo: str, commit: str) -> list:
    tree = ast.parse(git(repo, "show", f"{commit}:{OPT_EINSUM_TESTS}"))
    tests = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", None) == "tests")
    names = {"_no_collision_chars", "_valid_chars", "_sizes", "_default_dim_dict"}
    table: dict = {}
    sizes_module = ast.parse(git(repo, "show", f"{commit}:{OPT_EINSUM_SIZES}"))
    for node in sizes_module.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in names:
            exec(compile(ast.Module([node], []), OPT_EINSUM_SIZES, "exec"), table)  # noqa: S102 - the size table
    sizes = table["_default_dim_dict"]
    return [(spec, [[sizes[c] for c in term] for term in spec.split("->")[0].split(",")]) for spec in tests]


def small(shapes: list) -> list:
    values = sorted({n for s in shapes for n in s if n > 1})
    mapped = {v: i + 2 for i, v in enumerate(values)}
    return [[mapped.get(n, n) for n in s] for s in shapes]


def canonical(spec: str) -> str:
    """The spec without spaces, letters renamed in order of appearance (numpy's sublist and string
    forms of one expression, and one expression in other letters, are one case)."""
    names: dict = {}
    return "".join(names.setdefault(c, LETTERS[len(names)]) if c.isalpha() else c for c in "".join(spec.split()))


def pattern(shapes: list) -> str:
    """What decides numpy's reading of the shapes: ranks and which sizes are 0, 1 or larger."""
    return json.dumps([[min(n, 2) for n in s] for s in shapes])


def accepts(spec: str, shapes: list) -> bool:
    try:
        np.einsum(spec, *[np.ones(s) for s in shapes])
    except (ValueError, TypeError):
        return False
    return True


def main(numpy_repo: str, opt_einsum_repo: str) -> None:
    numpy_commit = git(numpy_repo, "rev-parse", "HEAD").strip()
    opt_commit = git(opt_einsum_repo, "rev-parse", "HEAD").strip()
    with tempfile.TemporaryDirectory() as tmp:
        test_file = Path(tmp) / "test_numpy_einsum.py"
        test_file.write_text(git(numpy_repo, "show", f"{numpy_commit}:{NUMPY_TESTS}"))
        recorded = record_numpy(str(test_file))
    cases: dict = {}
    for source, found in (("numpy", recorded), ("opt_einsum", opt_einsum_cases(opt_einsum_repo, opt_commit))):
        for spec, shapes in found:
            shrunk = small(shapes)
            assert accepts(spec, shrunk) == accepts(spec, shapes), (spec, shapes)
            case = cases.setdefault((canonical(spec), pattern(shrunk)), [source, spec, shrunk])
            if source not in case[0].split("+"):
                case[0] += "+" + source  # numpy's tests repeat many of opt_einsum's: run once, named by both
    document = {
        "sources": {
            "numpy": {"repository": "https://github.com/numpy/numpy", "commit": numpy_commit, "path": NUMPY_TESTS},
            "opt_einsum": {"repository": "https://github.com/dgasmith/opt_einsum", "commit": opt_commit,
                           "path": OPT_EINSUM_TESTS},
        },
        "built_by": "tests/einsum/make_einsum_cases.py",
        "cases": list(cases.values()),
    }
    text = json.dumps(document, indent=1)
    for case in document["cases"]:  # one case a line
        text = text.replace(json.dumps(case, indent=1).replace("\n", "\n  "), json.dumps(case), 1)
    OUT.write_text(text + "\n")
    print(f"{len(cases)} cases written to {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
