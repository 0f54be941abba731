"""The allocator tuning applies once per process and leaves a user's own malloc settings alone."""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

from trdb.kernels import allocator


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tuning_applies_once_per_process():
    assert allocator.tune_allocator() is True  # importing trdb applied it already
    assert allocator._tuned


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                    reason="glibc only")
def test_a_user_setting_is_kept():
    code = ("import ctypes, trdb.kernels.allocator as a; calls = []; "
            "a.ctypes.CDLL = lambda name: type('L', (), {'mallopt': lambda self, *p: calls.append(p)})(); "
            "a._tuned = False; a.tune_allocator(); print(calls)")
    env = {"MALLOC_MMAP_THRESHOLD_": "1048576", "PATH": "",  # and where trdb is, if it is found through PYTHONPATH
           **{name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[({allocator.M_TRIM_THRESHOLD}, {allocator.trim_threshold()}), ({allocator.M_ARENA_MAX}, 1)]"


ARENAS = """
import ctypes, os, sys, tempfile
import numpy as np
import trdb
con = trdb.connect(workers=2, min_parallel_cost=0)
cur = con.cursor()
cur.execute("CREATE TENSOR A FROM ? TILE (64, 64)", [np.ones((512, 512), dtype=np.float32)])
for _ in range(3):
    cur.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN A AS B ON A.j = B.i GROUP BY A.i, B.j").fetchall()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
handle = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(handle))
libc.fclose(ctypes.c_void_p(handle))
print(open(path).read().count("<heap nr="))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                    reason="glibc only")
def test_worker_threads_and_duckdb_s_share_one_arena():
    """Imported first, the tuning reaches every thread: after parallel queries glibc has one arena (heap)."""
    out = subprocess.run([sys.executable, "-c", ARENAS], capture_output=True, text=True, check=True,
                         env={k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_")})
    assert out.stdout.strip() == "1"
