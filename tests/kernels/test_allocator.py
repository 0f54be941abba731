"""The allocator tuning applies once per process and leaves a user's own malloc settings alone."""
from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

from trdb.kernels import allocator


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_tuning_applies_once_per_process():
    assert allocator.tune_allocator() is True  # trdb.connect() in other tests applied it already
    assert allocator._tuned


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                    reason="glibc only")
def test_a_user_setting_is_kept():
    code = ("import ctypes, trdb.kernels.allocator as a; calls = []; "
            "a.ctypes.CDLL = lambda name: type('L', (), {'mallopt': lambda self, *p: calls.append(p)})(); "
            "a.tune_allocator(); print(calls)")
    env = {"MALLOC_MMAP_THRESHOLD_": "1048576", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[({allocator.M_TRIM_THRESHOLD}, {allocator.TRIM_THRESHOLD})]"
