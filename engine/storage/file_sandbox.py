"""The one check of every file trdb opens itself: DuckDB's file access settings, on the path the file resolves to.

trdb reads and writes some files without DuckDB (COPY through pyarrow, .npy files, EXPORT's catalog,
external datasets), so it must refuse what DuckDB's own readers refuse: with `enable_external_access`
off, anything outside `allowed_directories` and `allowed_paths`; with `LocalFileSystem` in
`disabled_filesystems`, every local file. The check is made on the resolved path (symbolic links and
`..` followed, as DuckDB does), and callers open that resolved path, so a link inside an allowed
directory cannot lead outside it. DuckDB does not report `disabled_filesystems` through
current_setting, so a probe asks DuckDB itself, on a connection of its own: a refused probe would
otherwise abort the statement's transaction.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from trdb.errors import OperationalError
from trdb.storage.database import Database

_HINT = "SET allowed_directories or allowed_paths before disabling enable_external_access"
_DISABLED = "File system LocalFileSystem has been disabled by configuration"


@dataclass(frozen=True)
class FileSandbox:
    """DuckDB's file access settings as they stood when read (picklable: a Ray worker checks with it too)."""

    external_access: bool = True
    directories: tuple[str, ...] = ()   # resolved, each ending in a separator
    paths: tuple[str, ...] = ()         # resolved
    local_disabled: bool = False

    def refusal(self, path: str) -> Optional[str]:
        """Why DuckDB would refuse the file at `path` (resolved, or an s3:// URI), or None."""
        remote = "://" in path
        if self.local_disabled and not remote:
            return _DISABLED
        if self.external_access or path in self.paths or \
                any((path + ("/" if remote else os.sep)).startswith(d) for d in self.directories):
            return None
        return f'Cannot access file "{path}" - file system operations are disabled by configuration'

    def resolved(self, path: str) -> str:
        """The resolved path of a local file trdb is about to open; an OperationalError where it is refused."""
        full = resolve(path)
        refusal = self.refusal(full)
        if refusal:
            shown = refusal if full == os.path.abspath(path) else f"{refusal} ('{path}' leads to '{full}')"
            raise OperationalError(shown, hint=None if self.local_disabled else _HINT)
        return full


def resolve(path: str) -> str:
    """The absolute path with every symbolic link and `..` followed (a file not there yet: its folder's)."""
    return os.path.realpath(os.path.abspath(path))


def sandbox(db: Database) -> FileSandbox:
    """The settings as they stand now (global settings of the DuckDB instance, read on a connection of its own)."""
    probe = db.file.connection()
    try:
        access, directories, paths = probe.execute(
            "SELECT current_setting('enable_external_access'), current_setting('allowed_directories'), "
            "current_setting('allowed_paths')").fetchall()[0]
        return FileSandbox(bool(access), tuple(os.path.join(resolve(d), "") if "://" not in d else d.rstrip("/") + "/"
                                               for d in directories or ()),
                           tuple(resolve(p) if "://" not in p else p for p in paths or ()), _local_disabled(probe))
    finally:
        probe.close()


def _local_disabled(probe) -> bool:
    """Whether DuckDB refuses local files altogether (it checks disabled file systems before any other rule)."""
    import duckdb

    try:
        probe.execute("SELECT count(*) FROM glob('/')").fetchall()
    except duckdb.Error as exc:
        return "LocalFileSystem" in str(exc)
    return False


def checked(db: Database, path: str) -> str:
    """`path` resolved, after DuckDB's settings allow it; the path to open."""
    return sandbox(db).resolved(path)
