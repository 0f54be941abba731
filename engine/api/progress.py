"""Run one statement in a worker thread: an elapsed-time spinner on stderr after a second, Ctrl-C cancels it."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Optional, TextIO

import trdb
from trdb.errors import QueryCancelled

SPINNER_DELAY = 1.0     # seconds a statement runs before the spinner shows
TICK = 0.1              # how often the waiting thread wakes up (spinner frames, Ctrl-C)
FRAMES = "|/-\\"


@dataclass
class Outcome:
    """What a statement returned: column names (None for a statement without rows), rows, time taken."""

    names: Optional[list[str]]
    rows: list[tuple] = field(default_factory=list)
    rowcount: int = -1
    elapsed: float = 0.0


def _work(cursor: trdb.Cursor, sql: str, box: dict, done: threading.Event) -> None:
    try:
        cursor.execute(sql)
        names = [d[0] for d in cursor.description] if cursor.description else None
        rows = cursor.fetchall() if names is not None else []
        box["outcome"] = Outcome(names, rows, cursor.rowcount)
    except BaseException as exc:  # handed to the waiting thread, which raises it
        box["error"] = exc
    finally:
        done.set()


class _Spinner:
    """A tqdm line on the stream: a turning bar and the time since the statement started; cleared when done."""

    def __init__(self, stream: TextIO, start: float):
        self.frame, self.start = 0, start
        from tqdm import tqdm  # loaded only when a statement runs long in a terminal

        class Bar(tqdm):
            monitor_interval = 0  # the waiting thread refreshes the line: no tqdm monitor thread

        self.bar = Bar(total=None, file=stream, leave=False, mininterval=0, dynamic_ncols=True, bar_format="{desc}")
        self.tick()

    def tick(self, label: str = "running", note: str = "(Ctrl-C cancels)") -> None:
        self.frame = (self.frame + 1) % len(FRAMES)
        elapsed = time.perf_counter() - self.start
        self.bar.set_description_str(f"{FRAMES[self.frame]} {label} {elapsed:.1f} s {note}".rstrip(),
                                     refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def is_terminal(stream: Optional[TextIO]) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def execute(con: trdb.Connection, sql: str, progress: Optional[TextIO] = None,
            delay: float = SPINNER_DELAY) -> Outcome:
    """Run sql on a new cursor of con and fetch its rows; raises the statement's trdb.Error.

    Ctrl-C (KeyboardInterrupt in this, the main, thread) closes the cursor, which cancels the
    statement; QueryCancelled is raised once it has stopped unless it had already finished."""
    cursor, box, done = con.cursor(), {}, threading.Event()
    # Waiting on an Event, never Thread.join: a KeyboardInterrupt inside join() can leave the thread
    # marked as stopped while it still runs (CPython gh-90882).
    worker = threading.Thread(target=_work, args=(cursor, sql, box, done), name="trdb-statement", daemon=True)
    start = time.perf_counter()
    spinner: Optional[_Spinner] = None
    worker.start()
    try:
        while not done.wait(TICK):
            if spinner is None and time.perf_counter() - start >= delay and is_terminal(progress):
                spinner = _Spinner(progress, start)
            elif spinner is not None:
                spinner.tick()
    except KeyboardInterrupt:
        _cancel(cursor, done, spinner)
        if "outcome" not in box:
            raise QueryCancelled("cancelled") from None
    finally:
        if spinner is not None:
            spinner.close()
    if isinstance(box.get("error"), KeyboardInterrupt):  # DuckDB saw the Ctrl-C itself
        raise QueryCancelled("cancelled") from None
    if "error" in box:
        raise box.pop("error")
    box["outcome"].elapsed = time.perf_counter() - start
    return box["outcome"]


def _cancel(cursor: trdb.Cursor, done: threading.Event, spinner: Optional[_Spinner]) -> None:
    """Close the cursor until the worker stops: a cancel that lands before the statement's execution
    state exists (while it is parsed or planned) is lost, so it is repeated."""
    note = ""
    while not done.is_set():
        try:
            cursor.close()
            if done.wait(TICK):
                return
            if spinner is not None:
                spinner.tick("cancelling", note)
        except KeyboardInterrupt:  # Ctrl-C again: the statement does not stop (plain SQL runs in DuckDB)
            note = "(this statement cannot be interrupted: waiting for its end; Ctrl-\\ quits trdb)"
