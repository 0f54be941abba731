"""Session settings: each declared once, settable by SET and by TRDB_<NAME> environment variables."""
from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

from trdb.config import unit_costs
from trdb.errors import ProgrammingError, suggest


def physical_memory() -> int:
    """This machine's memory in bytes (8 GiB when it cannot be read)."""
    return _physical_memory()


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


_UNITS = {"": 1, "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def _parse_bytes(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("expected a size such as 4GB")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("expected a finite size such as 4GB")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("expected a whole number of bytes, or a size such as 1.5GB")
    if isinstance(value, (int, float)):
        size = int(value)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError("expected a size such as 512MB or 4GB")
        size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if not 0 < size < 2 ** 63:
        raise ValueError("must be positive and below 2**63 bytes (8 EiB)")
    return size


def _parse_bytes_or_zero(value: Any) -> int:
    """A size, or 0 for "the default"."""
    if not isinstance(value, bool) and str(value).strip() == "0":
        return 0
    return _parse_bytes(value)


def _parse_positive_int(value: Any) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or str(value).strip().isdigit()):
        raise ValueError("expected a positive integer")
    number = int(value)
    if number < 1:
        raise ValueError("expected a positive integer")
    return number


def max_workers() -> int:
    """The most workers a session may ask for: each is a thread, and more than a few per core only wait."""
    return max(16, 4 * (os.cpu_count() or 1))


def _parse_workers(value: Any) -> int:
    number = _parse_positive_int(value)
    if number > max_workers():
        raise ValueError(f"at most {max_workers()} workers (4 per core, at least 16) can run")
    return number


def _parse_count(value: Any) -> int:
    """A positive count that may be written 16e6 or 16000000."""
    try:
        number = float(value) if not isinstance(value, int) else value
    except (TypeError, ValueError):
        raise ValueError("expected a positive number") from None
    if isinstance(value, bool) or not 1 <= number < 2 ** 63:
        raise ValueError("expected a positive number below 2**63")
    if number != int(number):
        raise ValueError("expected a whole number")
    return int(number)


def _choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError("expected one of " + ", ".join(f"'{c}'" for c in choices))
        return text
    return parse


def _parse_executor(value: Any) -> str:
    executor = _choice("local", "ray")(value)
    if executor == "ray":
        try:
            import ray  # noqa: F401  (an optional dependency: only this executor needs it)
        except ImportError:
            raise ValueError("the Ray executor needs Ray, which is not installed: pip install 'trdb[ray]'") from None
    return executor


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "true", "1", "yes"):
        return True
    if text in ("off", "false", "0", "no"):
        return False
    raise ValueError("expected on or off")


def _parse_roots(value: Any) -> str:
    """Comma-separated directories and s3://bucket[/prefix] URIs (storage.external_location reads them)."""
    roots = [part.strip() for part in str(value).split(",") if part.strip()]
    for root in roots:
        if "\x00" in root or ("://" in root and not root.lower().startswith(("s3://", "file://"))):
            raise ValueError(f"'{root}' is neither a directory nor an s3:// URI")
    return ",".join(roots)


def _parse_endpoint(value: Any) -> str:
    text = str(value).strip()
    if text and not re.fullmatch(r"(https?://)?[A-Za-z0-9.\-\[\]:]+/?", text):
        raise ValueError("expected host:port or http(s)://host:port, such as 'http://127.0.0.1:9000'")
    return text.rstrip("/")


# The optimizer's rules in the order its driver runs them (optimizer/driver.py checks it runs these).
OPTIMIZER_RULES = ("constant_folding", "predicate_pushdown", "outer_join_elimination", "join_ordering",
                   "redundant_rekey_removal", "single_row_groups", "nested_sums", "kernel_fusion",
                   "aggregate_pushdown", "projection_pruning", "dense_products")
# exchange placement, skippable the same way (optimizer/physical_rules/)
PHYSICAL_RULES = ("co_partitioned_join", "co_partitioned_by_right_join", "broadcast_right_join", "broadcast_left_join",
                  "two_phase_aggregate", "banded_aggregate")
# rewrites made as a plan is expanded, before autodiff reads it (optimizer/product_chains.py)
EXPANSION_RULES = ("product_chains",)


def _parse_rule_list(value: Any) -> str:
    names = [name.strip().lower() for name in str(value).split(",") if name.strip()]
    for name in names:
        if name not in OPTIMIZER_RULES + PHYSICAL_RULES + EXPANSION_RULES:
            raise ValueError(f"'{name}' is not an optimizer rule; the rules are " + ", ".join(OPTIMIZER_RULES)
                             + "; the physical rules are " + ", ".join(PHYSICAL_RULES)
                             + "; the expansion rule is " + ", ".join(EXPANSION_RULES))
    return ",".join(names)


def _parse_cost(value: Any) -> float:
    try:
        cost = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a non-negative number (cost units, see docs/optimizer.md)") from None
    if isinstance(value, bool) or not cost >= 0:
        raise ValueError("expected a non-negative number (cost units, see docs/optimizer.md)")
    return cost


def _unit_cost(name: str) -> float:
    return getattr(unit_costs, name)


@dataclass(frozen=True)
class Setting:
    name: str
    default: Callable[[], Any]
    parse: Callable[[Any], Any]
    meaning: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("workers", lambda: min(os.cpu_count() or 1, max_workers()), _parse_workers,
            "parallel workers; the planner places exchange operators for them"),
    Setting("device", lambda: "auto", _choice("auto", "cpu", "gpu"),
            "'cpu', 'gpu' or 'auto' (GPU when CuPy sees one)"),
    Setting("executor", lambda: "local", _parse_executor,
            "'local' (threads in this process) or 'ray' (a Ray cluster)"),
    Setting("ray_address", lambda: "", str,
            "the Ray cluster of the 'ray' executor: host:port, 'auto', or '' (a running local cluster, "
            "else a new one)"),
    Setting("ray_resident_bytes", lambda: 1 << 30, _parse_bytes_or_zero,
            "tensor partitions each Ray worker keeps across statements (least recently used dropped "
            "first); 0 keeps none: every statement ships its inputs"),
    Setting("ray_disk_cache_bytes", lambda: 4 << 30, _parse_bytes_or_zero,
            "tensor partitions each Ray worker keeps on its node's local disk (in the temp directory) when "
            "they no longer fit ray_resident_bytes, read back there instead of shipped again; removed when "
            "the tensor changes or the worker ends; 0 keeps none"),
    Setting("memory_limit", lambda: int(_physical_memory() * 0.8), _parse_bytes,
            "memory for the whole database (every connection): cached tiles, operator state, "
            "exchange queues, results and DuckDB's own; operators spill to temp_directory beyond it"),
    Setting("gpu_memory_limit", lambda: 0, _parse_bytes_or_zero,
            "GPU memory for operator state, exchange queues and results while device is 'gpu' (0: 80% "
            "of the device's memory); operators spill beyond it; database-wide"),
    Setting("temp_directory", lambda: "", str,
            "where operators spill ('' : beside the database file, or the system's temp directory "
            "for a database in memory); database-wide"),
    Setting("external_roots", lambda: "", _parse_roots,
            "where external tensors (CREATE TENSOR ... LOCATION) may live: comma-separated directories and "
            "s3://bucket/prefix URIs ('' : the database file's directory; none for a database in memory); "
            "database-wide, never stored in the file"),
    Setting("s3_endpoint", lambda: "", _parse_endpoint,
            "the S3-compatible server external tensors on s3:// are read from, as host:port or "
            "http(s)://host:port ('' : AWS); credentials come from the environment and ~/.aws; database-wide"),
    Setting("max_tuples", lambda: 16_000_000, _parse_count,
            "statements estimated to produce more tuples than this are refused before they run"),
    Setting("max_bytes", lambda: 1 << 40, _parse_bytes,
            "statements estimated to produce or hold more bytes than this are refused before they run"),
    Setting("disabled_rules", lambda: "", _parse_rule_list,
            "optimizer rules to skip, comma-separated, by name (logical, physical and expansion rules)"),
    Setting("min_parallel_cost", lambda: _unit_cost("MIN_PARALLEL_COST"), _parse_cost,
            "plans estimated to cost less run on one worker (0: always use `workers`)"),
    Setting("dense_einsum_bytes", lambda: 512 << 20, _parse_bytes_or_zero,
            "an EINSUM of stored tensors with every tile present whose operands, largest intermediate and "
            "result take at most this many bytes (and an eighth of memory_limit) runs as one kernel call on "
            "whole arrays, not as joins and sums of tiles, and so does a SUM(MATMUL) over a join of two such "
            "matrices (optimizer/rules/dense_products.py); 0: always tiles"),
    Setting("progress", lambda: False, _parse_bool, "a progress bar on long statements"),
)}


# one value per database, as DuckDB's global settings
DATABASE_WIDE = frozenset({"memory_limit", "gpu_memory_limit", "temp_directory", "external_roots", "s3_endpoint"})


class Settings:
    """The values in force for one connection: defaults, then TRDB_<NAME> variables, then SET.
    The DATABASE_WIDE ones live in a dict every connection to one database shares (see `share`)."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._shared: Optional[dict[str, Any]] = None
        self._snapshot: Optional[tuple] = None
        for name in SETTINGS:
            self.reset(name)

    def share(self, shared: dict[str, Any], given: frozenset = frozenset()) -> None:
        """Use the database's values of the DATABASE_WIDE settings: the first connection's values start
        them; a later connection's `given` ones (passed to connect) change them for every connection."""
        for name in DATABASE_WIDE:
            if name not in shared or name in given:
                shared[name] = self._values[name]
            self._values.pop(name, None)
        self._shared = shared
        self._snapshot = None

    def _store(self, name: str) -> dict[str, Any]:
        return self._shared if self._shared is not None and name in DATABASE_WIDE else self._values

    @staticmethod
    def declared(name: str) -> Setting:
        setting = SETTINGS.get(name.lower())
        if setting is None:
            close = suggest(name.lower(), SETTINGS)
            raise ProgrammingError(f'unknown setting "{name}"',
                                   hint=f'did you mean "{close}"?' if close else
                                   "settings: " + ", ".join(SETTINGS))
        return setting

    def snapshot(self) -> tuple:
        """Every value in force, hashable: what a cached plan was chosen under (kept until a change)."""
        if self._snapshot is None:
            self._snapshot = tuple(sorted((name, value) for name, value in self._values.items()))
        if self._shared is None:
            return self._snapshot
        return self._snapshot + tuple(sorted(self._shared.items()))

    def set(self, name: str, value: Any) -> None:
        setting = self.declared(name)
        try:
            self._store(setting.name)[setting.name] = setting.parse(value)
            self._snapshot = None
        except ValueError as exc:
            raise ProgrammingError(f"invalid value {value!r} for setting {setting.name}: {exc}") from None

    def reset(self, name: str) -> None:
        setting = self.declared(name)
        env = os.environ.get(f"TRDB_{setting.name.upper()}")
        if env is None:
            self._store(setting.name)[setting.name] = setting.default()
            self._snapshot = None
            return
        try:
            self._store(setting.name)[setting.name] = setting.parse(env)
            self._snapshot = None
        except ValueError as exc:
            raise ProgrammingError(f"invalid TRDB_{setting.name.upper()}={env!r}: {exc}") from None

    @contextmanager
    def restored_on_failure(self, name: str, apply: Callable[[], None]) -> Iterator[None]:
        """Around SET / RESET of `name` and `apply()`, which puts the new value in force (a database-wide one
        may fail there, as an unwritable temp_directory does): if either fails, the value before comes back
        and is put in force again, so a statement that fails changes no setting."""
        store = self._store(self.declared(name).name)
        key = name.lower()
        before = store[key]
        try:
            yield
        except BaseException:
            store[key] = before
            self._snapshot = None
            with suppress(Exception):  # it was in force before the statement: the first error is the one to report
                apply()
            raise

    def get(self, name: str) -> Any:
        name = self.declared(name).name
        return self._store(name)[name]

    def items(self) -> list[tuple[str, Any]]:
        return sorted({**self._values, **(self._shared or {})}.items())

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values")
        if values is not None and name in values:
            return values[name]
        shared = self.__dict__.get("_shared")
        if shared is not None and name in shared:
            return shared[name]
        raise AttributeError(name)
