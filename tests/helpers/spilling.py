"""Helpers for the tests of spilling operators: run one operator under a memory budget, list spill files."""
from __future__ import annotations

import os

from trdb.execution.operators.operator import ExecContext, drain
from trdb.kernels.numpy_backend import NUMPY_BACKEND
from trdb.storage.spill import SpillDirectory


def run_operator(operator, memory, spill_root) -> list:
    """Every tuple of `operator`, opened under `memory` with its spill files under `spill_root`; closed after."""
    operator.open(ExecContext(NUMPY_BACKEND, None, memory=memory, spill=SpillDirectory(str(spill_root))))
    try:
        return list(drain(operator))
    finally:
        operator.close()


def spill_files(root) -> list[str]:
    """The files left under a temp_directory (DuckDB's own folder aside)."""
    return [os.path.join(folder, name) for folder, _, names in os.walk(root) if "duckdb" not in folder
            for name in names]
