"""PythonViews: Python data (pandas, Arrow, polars) readable as views of a session, registered or scanned."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from trdb import errors


class PythonViews:
    """The registered data of a Session (its base class): `db` and `catalog` are the session's."""

    def register(self, name: str, data: Any) -> None:
        """con.register: a DataFrame or Arrow table readable as a view of this connection (until unregister)."""
        if self.catalog.tensor(name) or self.catalog.view(name):
            raise errors.IntegrityError(f'a tensor or view named "{name}" already exists',
                                        hint="register the data under another name")
        self.db.register(name, _registrable(data))
        self.catalog.forget_ordinary_tables()

    def unregister(self, name: str) -> None:
        self.db.unregister(name)
        self.catalog.forget_ordinary_tables()

    def known_relation(self, name: str) -> bool:
        """Whether a tensor, view or ordinary table has the name (a replacement scan never shadows one)."""
        return bool(self.catalog.tensor(name) or self.catalog.view(name) or self.catalog.ordinary_table(name))

    @contextmanager
    def _scans(self, scans: Mapping[str, Any]) -> Iterator[None]:
        registered = []
        try:
            for name, data in scans.items():
                self.db.register(name, _registrable(data))
                registered.append(name)
            self.catalog.forget_ordinary_tables()
            yield
        finally:
            for name in registered:
                self.db.unregister(name)
            self.catalog.forget_ordinary_tables()


def _registrable(data: Any) -> Any:
    """What DuckDB can register: pandas and Arrow as they are, polars through Arrow."""
    if type(data).__module__.startswith("polars") and hasattr(data, "to_arrow"):
        return data.to_arrow()
    return data
