"""The LALR parser's tables, kept between processes in the user's cache directory.

Building them from the grammar takes about 0.15 s, at the start of every shell, batch file and program;
loading them, about 0.02 s.

The tables are plain data (dicts, lists, strings, numbers), stored with `marshal`, which cannot run code as
it loads (pickle can). A file is read only from a directory and file that the user owns and no one else may
write; one that is missing, damaged or from another grammar, lark or Python is ignored and built again.
`TRDB_PARSER_CACHE=off` turns the cache off; `TRDB_PARSER_CACHE=<folder>` puts it elsewhere."""
from __future__ import annotations

import hashlib
import marshal
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import lark
from lark import Lark
from lark.grammar import Rule
from lark.lexer import TerminalDef

_NOT_OURS = stat.S_IWGRP | stat.S_IWOTH  # writable by others: someone else could have put tables there
_MAX_BYTES = 16 << 20  # the tables are about 0.2 MB; a larger file is not ours


def cached_lark(grammar: str, options: dict[str, Any], build: Callable[[], Lark]) -> Lark:
    """The parser `build()` makes from `grammar` with `options`, loaded from the cache where it holds it (with
    `options`' objects, such as the post-lexer, passed again), else built and stored for the next process."""
    try:
        path = _path(grammar, options)
    except (OSError, RuntimeError):  # no home folder to find (no HOME, no user entry): no cache
        path = None
    if path is not None:
        loaded = _load(path, options)
        if loaded is not None:
            return loaded
    parser = build()
    if path is not None:
        _store(path, parser)
    return parser


def _path(grammar: str, options: dict[str, Any]) -> Optional[Path]:
    setting = os.environ.get("TRDB_PARSER_CACHE", "")
    if setting.lower() == "off" or not hasattr(os, "getuid"):
        return None
    folder = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trdb"
    key = repr((grammar, sorted((name, repr(value)) for name, value in options.items() if _plain(value)),
                lark.__version__, sys.version_info[:2]))
    return folder / f"parser-{hashlib.sha256(key.encode()).hexdigest()[:32]}.marshal"


def _plain(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, list, tuple, type(None)))


def _load(path: Path, options: dict[str, Any]) -> Optional[Lark]:
    try:
        with open(path, "rb") as file:
            if not (_ours(os.fstat(file.fileno())) and _ours(os.stat(path.parent))):
                return None
            content = file.read(_MAX_BYTES + 1)
        if len(content) > _MAX_BYTES:
            return None
        data, memo = marshal.loads(content)
        return Lark._load_from_dict(data, memo, **{k: v for k, v in options.items() if not _plain(v)})
    except Exception:  # missing, damaged, or tables this lark cannot read: built again
        return None


def _ours(status: os.stat_result) -> bool:
    """Owned by this user, and writable by no one else."""
    return status.st_uid == os.getuid() and not status.st_mode & _NOT_OURS


def _store(path: Path, parser: Lark) -> None:
    try:
        data, memo = parser.memo_serialize([TerminalDef, Rule])
        data["options"] = {name: value if _plain(value) or isinstance(value, dict) else None
                           for name, value in data["options"].items()}
        content = marshal.dumps((data, memo))
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _ours(os.stat(path.parent)):
            return
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".parser-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(content)
            os.replace(temporary, path)  # whole or not at all, whichever process writes it last
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except Exception:  # no cache directory to write (a read-only home): the next process builds too
        return
