"""trdb: a tensor-relational database engine (connect() and the PEP 249 globals)."""
from trdb.api.dbapi import BINARY, DATETIME, NUMBER, ROWID, STRING, TENSOR, Connection, Cursor, DBAPITypeObject, connect
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
    "connect", "Connection", "Cursor", "apilevel", "threadsafety", "paramstyle",
    "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
    "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    "STRING", "BINARY", "NUMBER", "DATETIME", "ROWID", "TENSOR", "DBAPITypeObject",
]
