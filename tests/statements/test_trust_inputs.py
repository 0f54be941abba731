"""Ordinary bad input is a trdb error that says what is wrong, never a crash or an InternalError: scipy.sparse
matrices whose arrays do not agree, list parameters where a value goes, arguments out of range, files that
are not what their name says, a disk that fills up."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import trdb

# ------------------------------------------------------------ scipy.sparse inputs

_DEFECTS = {  # a matrix of shape (3, 3) whose arrays were set by hand: scipy trusts them
    "indptr past the entries": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 1, 2], np.int32); "
                               "m.indptr = np.array([0, 1 << 20, 0, 3], np.int32)",
    "indptr not monotone": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 1, 2], np.int32); "
                           "m.indptr = np.array([0, 2, 1, 3], np.int32)",
    "indptr too short": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 1, 2], np.int32); "
                        "m.indptr = np.array([0, 3], np.int32)",
    "indices out of range": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, 7, 2], np.int32); "
                            "m.indptr = np.array([0, 1, 2, 3], np.int32)",
    "negative index": "m = csr((3, 3)); m.data = np.ones(3); m.indices = np.array([0, -5, 2], np.int32); "
                      "m.indptr = np.array([0, 1, 2, 3], np.int32)",
    "csc indptr past the entries": "m = sp.csc_matrix((3, 3)); m.data = np.ones(2); "
                                   "m.indices = np.array([0, 1], np.int32); m.indptr = np.array([0, 9000, 1, 2], np.int32)",
    "coo row out of range": "m = sp.coo_matrix((3, 3)); m.data = np.ones(2); "
                            "m.coords = (np.array([0, 1 << 30]), np.array([0, 1]))",
    "coo coordinates shorter than data": "m = sp.coo_matrix((3, 3)); m.data = np.ones(5); "
                                         "m.coords = (np.array([0, 1]), np.array([0, 1]))",
    "negative shape": "m = csr((3, 3)); m._shape = (-3, 3)",
}
_STATEMENTS = {
    "CREATE FROM ?": "con.execute('CREATE TENSOR S FROM ?', [m])",
    "FROM COO ?": "con.execute('CREATE TENSOR S FROM COO ? (r, c, v) SHAPE (3, 3) TILE (2, 2)', [m])",
    "INSERT": "con.execute('CREATE TENSOR T SHAPE (3, 3) TILE (3, 3)'); con.execute('INSERT INTO T VALUES (0, 0, ?)', [m])",
    "a value": "con.execute('CREATE TENSOR T SHAPE (3, 3) TILE (3, 3) FILL ONES'); "
               "con.execute('SELECT T.v + ? AS v FROM T', [m]).fetchall()",
}


@pytest.mark.parametrize("defect", sorted(_DEFECTS))
def test_a_scipy_matrix_whose_arrays_disagree_is_a_data_error_not_a_crash(defect):
    """Each statement given the matrix, in a child: before the check, scipy's tocoo wrote past its arrays and
    killed the process (an index out of range was an InternalError)."""
    tries = "".join(f"""
        con = trdb.connect(workers=1)
        try:
            {_DEFECTS[defect]}
            {code}
            print({name!r}, "ACCEPTED")
        except trdb.Error as exc:
            print({name!r}, type(exc).__name__, str(exc).splitlines()[0])
        con.close()""" for name, code in _STATEMENTS.items())
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, trdb
        csr = sp.csr_matrix""" + tries + """
        print("DONE")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stdout}{done.stderr[-2000:]}"
    lines = done.stdout.splitlines()
    assert lines[-1] == "DONE" and len(lines) == len(_STATEMENTS) + 1, done.stdout
    for name, line in zip(_STATEMENTS, lines):
        assert line.startswith(f"{name} DataError") and "scipy.sparse" in line, line


def test_a_good_scipy_matrix_is_still_taken():
    import numpy as np
    import scipy.sparse as sp

    m = sp.random(30, 20, density=0.1, format="csr", random_state=1)
    with trdb.connect(workers=1) as con:
        for fmt in ("csr", "csc", "coo", "bsr", "lil", "dok", "dia"):
            con.execute(f"CREATE TENSOR S_{fmt} FROM ? TILE (8, 8)", [m.asformat(fmt)])
            np.testing.assert_allclose(con.execute(f"SELECT * FROM S_{fmt}").fetch_tensor(), m.toarray())
        con.execute("CREATE TENSOR C FROM COO ? (r, c, v) SHAPE (30, 20) TILE (8, 8)", [m])
        np.testing.assert_allclose(con.execute("SELECT * FROM C").fetch_tensor(), m.toarray())
