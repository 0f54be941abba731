"""trdb: a tensor-relational database engine (connect(), the PEP 249 globals, DuckDB's module-level calls)."""
import trdb.kernels.allocator  # noqa: F401  first: it tunes malloc before any thread starts (its docstring)
from trdb.api.dbapi import Connection, Cursor, connect
from trdb.api.default_connection import (
                            default_connection,
                            execute,
                            executemany,
                            from_arrow,
                            from_df,
                            query,
                            read_csv,
                            read_parquet,
                            sql,
                            table,
)
from trdb.api.relation import Relation
from trdb.api.type_objects import (
                            BINARY,
                            DATETIME,
                            NUMBER,
                            ROWID,
                            STRING,
                            TENSOR,
                            Binary,
                            Date,
                            DateFromTicks,
                            DBAPITypeObject,
                            Time,
                            TimeFromTicks,
                            Timestamp,
                            TimestampFromTicks,
)
from trdb.errors import (
                            DatabaseError,
                            DataError,
                            Error,
                            IntegrityError,
                            InterfaceError,
                            InternalError,
                            NotSupportedError,
                            OperationalError,
                            ProgrammingError,
                            Warning,
)

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"

__all__ = [
    "connect", "Connection", "Cursor", "Relation", "apilevel", "threadsafety", "paramstyle",
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID", "TENSOR", "DBAPITypeObject",
    "Date", "Time", "Timestamp", "DateFromTicks", "TimeFromTicks", "TimestampFromTicks", "Binary",
    "default_connection", "sql", "query", "execute", "executemany", "table", "read_parquet", "read_csv",
    "from_df", "from_arrow",
]
