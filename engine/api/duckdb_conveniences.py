"""DuckDB's conveniences on a connection: sql() relations, table(), read_parquet(), from_df(), register()."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from trdb import errors
from trdb.api.relation import Relation
from trdb.api.relation_sources import file_relation, frame_relation, table_relation


class DuckDBConveniences:
    """What a Connection (which inherits it) has beyond PEP 249, as DuckDB's connection has it; `cursor()`,
    `_session()`, `_live` and `released_frames` are the connection's."""

    def sql(self, query: str, params: Optional[Union[Sequence[Any], Mapping[str, Any]]] = None):
        """As DuckDB's con.sql: run the statement; a query gives a Relation (fetchall, df, arrow, tensor...),
        a statement without a result set gives None."""
        cursor = self.cursor().execute(query, params)
        if cursor.description is None:
            cursor.close()
            return None
        return Relation(self, query, params, cursor)

    query = sql

    def table(self, name: str) -> Relation:
        """As DuckDB's con.table: a relation of a tensor's, view's or table's rows."""
        return table_relation(self, name)

    def read_parquet(self, file_glob: Union[str, Sequence[str]], **options: Any) -> Relation:
        """As DuckDB's con.read_parquet: a relation of Parquet files (a path, a glob or a list of them);
        `options` are read_parquet's named parameters (hive_partitioning=True, union_by_name=True...)."""
        return file_relation(self, "read_parquet", file_glob, options)

    from_parquet = read_parquet

    def read_csv(self, path: Union[str, Sequence[str]], **options: Any) -> Relation:
        """As DuckDB's con.read_csv: a relation of CSV files; `options` are read_csv's named parameters."""
        return file_relation(self, "read_csv", path, options)

    def from_df(self, df: Any) -> Relation:
        """As DuckDB's con.from_df: a relation of a pandas (or polars) DataFrame's rows."""
        return frame_relation(self, df, "from_df")

    def from_arrow(self, data: Any) -> Relation:
        """As DuckDB's con.from_arrow: a relation of an Arrow table, record batch or reader."""
        return frame_relation(self, data, "from_arrow")

    def register(self, name: str, data: Any) -> "DuckDBConveniences":
        """Make a pandas/polars DataFrame or Arrow table readable under `name` (plain SQL, FROM COO name)."""
        if not isinstance(name, str) or not name:
            raise errors.ProgrammingError("register() takes a view name and a data frame")
        self._session().register(name, data)
        return self

    def unregister(self, name: str) -> "DuckDBConveniences":
        self._session().unregister(name)
        return self

    def unregister_released(self) -> None:
        """Unregister the data frames of relations that are gone: here, before a statement, never from the
        garbage collector, which may run while DuckDB is reading."""
        while self.released_frames and self._live is not None:
            self._live.unregister(self.released_frames.pop())
