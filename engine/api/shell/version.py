"""The installed trdb's version, as `trdb --version` and the shell's banner print it."""
from __future__ import annotations


def version() -> str:
    try:
        from importlib.metadata import version as installed

        return installed("trdb")
    except Exception:  # not installed as a distribution (run from a source tree)
        return "(source)"
