"""Statements that could allocate without bound run in a child process under RLIMIT_AS: a bomb dies there."""
from __future__ import annotations

import subprocess
import sys
import textwrap

GUARD = 3 << 30  # bytes of address space a child may take
HANG_GUARD = 300  # seconds: not a timing assertion, only so that a hang fails instead of blocking the run


def run_guarded(body: str, setup: str = "", timeout: int = HANG_GUARD) -> str:
    """Run `setup`, then `body`, in a child limited to GUARD bytes of address space, with numpy as np, pyarrow as pa,
    scipy.sparse, trdb and `cur` (a cursor of a database in memory) there; its stdout. It must exit cleanly."""
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({GUARD}, {GUARD}))
        import numpy as np
        import pyarrow as pa
        import scipy.sparse
        import trdb
        cur = trdb.connect().cursor()
    """) + textwrap.dedent(setup) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
