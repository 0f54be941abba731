"""What con.sql() returns, as DuckDB's Python API has it: a query's result to fetch in any form, again if wanted."""
from __future__ import annotations

from typing import Any, Optional

from trdb import errors
from trdb.api.relation_preview import PREVIEW_ROWS, preview_html, preview_rows, preview_text
from trdb.api.shell.formatting import format_rows
from trdb.api.type_objects import TENSOR

_EXPLAIN = {"standard": "EXPLAIN ", "analyze": "EXPLAIN ANALYZE "}
_KDL_CPU = 1  # DLPack's device type of host memory: the arrays a relation hands over are numpy's


class Relation:
    """A query run by con.sql() (or con.table(), read_parquet(), from_df(), ...). The first fetch reads the
    run that made the relation, where one did; each later one runs the query again (as a DuckDB relation
    does), so `rel.df()` and then `rel.tensor()` both see every row."""

    def __init__(self, connection, query: str, params: Any, cursor=None, description=None, keep: Any = None):
        self._connection = connection
        self._query = query
        self._params = params
        self._pending = cursor  # the run that made the relation, not yet fetched from
        self.description = cursor.description if cursor is not None else description
        self._keep = keep  # what the query reads while the relation lives (a registered data frame)

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

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, columns), as DuckDB's relation has it; the shape of a tensor result is `rel.tensor().shape`."""
        return len(self), len(self.columns)

    def sql_query(self) -> str:
        """The text that runs, as DuckDB's relation gives it."""
        return self._query

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

    def pl(self):
        """A polars DataFrame (as cursor.pl()); polars must be installed."""
        return self._fetch("pl")

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

    def explain(self, type: str = "standard") -> str:  # noqa: A002 (DuckDB's name for it)
        """The query's plan as text, as DuckDB's relation.explain(); type='analyze' runs it and adds what each
        operator did."""
        kind = str(getattr(type, "name", type)).lower()
        if kind not in _EXPLAIN:
            raise errors.ProgrammingError(f"explain(): unknown type {type!r}", hint="'standard' or 'analyze'")
        rows = self._connection.cursor().execute(_EXPLAIN[kind] + self._query, self._params).fetchall()
        return "\n".join(str(row[-1]).rstrip("\n") for row in rows) + "\n"

    def show(self, max_rows: int = 40) -> None:
        """Print the result as the shell does (tiles summarized), as DuckDB's relation.show()."""
        print(self._table(max_rows))

    def _table(self, max_rows: int = 40) -> str:
        return format_rows(self.columns, self.fetchall(), "table", max_rows)

    def __len__(self) -> int:
        """The number of rows, counted without fetching them."""
        if self._pending is not None:
            return max(self._pending.rowcount, 0)
        cursor = self._cursor()
        try:
            return max(cursor.rowcount, 0)
        finally:
            cursor.close()

    # ------------------------------------------------------------ notebooks and printing

    def _preview(self):
        cursor = self._cursor()
        try:
            return preview_rows(cursor, PREVIEW_ROWS)
        finally:
            cursor.close()

    def __repr__(self) -> str:
        """The first and last rows in a box, as printing a DuckDB relation shows them."""
        try:
            return preview_text(self.columns, self._preview())
        except errors.Error as exc:  # a closed connection, a table dropped since: say so, as a repr may
            return f"<trdb.Relation {self._query!r}: {exc.message}>"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return preview_html(self.columns, self.types, self._preview())

    # ------------------------------------------------------------ numpy and DLPack

    def _check_tensor(self, what: str) -> None:
        """An InterfaceError that says why, unless the result is a tensor relation (one array)."""
        if not any(t == TENSOR for t in self.types):
            raise errors.InterfaceError(
                f"{what}: the result is a table of {len(self.columns)} plain column(s) "
                f"({', '.join(self.columns)}), not a tensor",
                hint="a query of a tensor (SELECT ... FROM a TENSOR) gives one array; for plain columns use "
                     "rel.fetchnumpy(), rel.df() or rel.fetchall()")

    def __array__(self, dtype=None, copy=None):
        """np.asarray(rel): a tensor result assembled as one dense array (as rel.tensor())."""
        self._check_tensor("np.asarray(relation)")
        array = self.tensor()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """torch.from_dlpack(rel) (or any DLPack consumer): the dense array of a tensor result, in host memory."""
        self._check_tensor("from_dlpack(relation)")
        kwargs = {"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy}
        return self.tensor().__dlpack__(**{k: v for k, v in kwargs.items() if v is not None})

    def __dlpack_device__(self) -> tuple[int, int]:
        self._check_tensor("from_dlpack(relation)")
        return (_KDL_CPU, 0)
