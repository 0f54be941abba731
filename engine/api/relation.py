"""What con.sql() returns, as DuckDB's Python API has it: a query's result to fetch in any form, again if wanted."""
from __future__ import annotations

from typing import Any, Optional

from trdb.api.shell.formatting import format_rows


class Relation:
    """A query run by con.sql(). The first fetch reads the run that con.sql() started; each later one runs
    the query again (as a DuckDB relation does), so `rel.df()` and then `rel.tensor()` both see every row."""

    def __init__(self, connection, query: str, params: Any, cursor):
        self._connection = connection
        self._query = query
        self._params = params
        self._pending = cursor  # the run con.sql() made, not yet fetched from
        self.description = cursor.description

    def _cursor(self):
        cursor, self._pending = self._pending, None
        return cursor if cursor is not None else self._connection.cursor().execute(self._query, self._params)

    def _fetch(self, how: str, *args: Any) -> Any:
        cursor = self._cursor()
        try:
            return getattr(cursor, how)(*args)
        finally:
            cursor.close()

    @property
    def columns(self) -> list[str]:
        return [d[0] for d in self.description]

    @property
    def types(self) -> list[str]:
        return [d[1] for d in self.description]

    @property
    def dtypes(self) -> list[str]:
        return self.types

    def fetchall(self) -> list[tuple]:
        return self._fetch("fetchall")

    def fetchone(self) -> Optional[tuple]:
        return self._fetch("fetchone")

    def fetchmany(self, size: int = 1) -> list[tuple]:
        return self._fetch("fetchmany", size)

    def df(self):
        """A pandas DataFrame (as cursor.df())."""
        return self._fetch("df")

    fetchdf = to_df = df

    def arrow(self, batch_size: int = 256):
        """A pyarrow RecordBatchReader, as DuckDB 2.x's `arrow()` returns."""
        return self._fetch("arrow", batch_size)

    def to_arrow_table(self):
        """A pyarrow Table (keys, tiles as fixed_shape_tensor), as fetch_arrow()."""
        return self._fetch("fetch_arrow")

    fetch_arrow_table = to_arrow_table

    def fetchnumpy(self) -> dict:
        return self._fetch("fetchnumpy")

    def tensor(self, shape=None):
        """The result assembled as one dense numpy array, as fetch_tensor()."""
        return self._fetch("fetch_tensor", shape)

    def sparse(self, shape=None):
        """A 2-d result as a scipy.sparse CSR matrix, as fetch_sparse()."""
        return self._fetch("fetch_sparse", shape)

    def fetch_long(self):
        """The result in long form: (index, ..., value) rows, as cursor.fetch_long()."""
        return self._fetch("fetch_long")

    def show(self, max_rows: int = 40) -> None:
        """Print the result as the shell does (tiles summarized), as DuckDB's relation.show()."""
        print(self._table(max_rows))

    def _table(self, max_rows: int = 40) -> str:
        return format_rows(self.columns, self.fetchall(), "table", max_rows)

    def __len__(self) -> int:
        return len(self.fetchall())

    def __repr__(self) -> str:
        return f"<trdb.Relation {', '.join(f'{n} {t}' for n, t in zip(self.columns, self.types))}: {self._query!r}>"
