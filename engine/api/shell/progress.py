"""Run one statement in a worker thread: a progress line on stderr after a second (MINIMIZE: a bar with step,
loss and a loss sparkline), Ctrl-C cancels it."""
from __future__ import annotations

import os
import threading
import time
from contextvars import copy_context
from dataclasses import dataclass, field
from typing import Optional, TextIO

from trdb.api.dbapi import Connection, Cursor
from trdb.errors import QueryCancelled
from trdb.execution.workers import Finished
from trdb.statements.minimize import STEP_LISTENER
from trdb.storage.progress import PROGRESS, StatementProgress

SPINNER_DELAY = 1.0     # seconds a statement runs before the spinner shows
TICK = 0.1              # how often the waiting thread wakes up (spinner frames, Ctrl-C)
FRAMES = "|/-\\"
SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 16        # the sparkline shows the loss of the last this many steps
FLAT = 1e-3             # the sparkline's height stands for at least this fraction of the largest loss shown


@dataclass
class Outcome:
    """What a statement returned: column names (None for a statement without rows), rows, time taken."""

    names: Optional[list[str]]
    rows: list[tuple] = field(default_factory=list)
    rowcount: int = -1
    elapsed: float = 0.0
    status: Optional[str] = None  # the cursor's statusmessage (`UPDATE A: 12 tiles`), where it sets one
    types: list = field(default_factory=list)  # each column's type_code


def sparkline(values: list[float]) -> str:
    """The values as a line of block characters, lowest ▁ to highest █ (non-finite ones as a space). The
    height stands for at least FLAT of the values' size, so a loss that changes in its fifth digit
    draws a flat line, not the noise of that digit stretched to full height."""
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = max(high - low, FLAT * max(abs(v) for v in finite))
    scale = (len(SPARKS) - 1) / span if span > 0 else 0.0
    return "".join(SPARKS[round((v - low) * scale)] if v in finite else " " for v in values)


class StepReport:
    """What MINIMIZE reports as it runs: each committed step and its loss (written by the statement's thread)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.total = 0

    def __call__(self, step: int, steps: int, loss: float) -> None:
        self.total = steps
        self.losses.append(loss)  # one writer, one reader that only reads the length and items before it

    def kept_note(self) -> str:
        if not self.losses:
            return ""
        n = len(self.losses)
        return (f" MINIMIZE kept {n} of {self.total} step{'s' if self.total != 1 else ''} (the steps it had"
                f" committed); the loss after step {n} was {self.losses[-1]:.6g}.")


def _work(cursor: Cursor, sql: str, box: dict, done: Finished, steps: Optional[StepReport],
          counts: StatementProgress) -> None:
    try:
        PROGRESS.set(counts)  # the statement's scans, result and writes count into it (this thread's context)
        if steps is not None:
            STEP_LISTENER.set(steps)
        cursor.execute(sql)
        names = [d[0] for d in cursor.description] if cursor.description else None
        rows = cursor.fetchall() if names is not None else []
        box["outcome"] = Outcome(names, rows, cursor.rowcount, status=getattr(cursor, "statusmessage", None),
                                 types=[d[1] for d in cursor.description or ()])
    except BaseException as exc:  # handed to the waiting thread, which raises it
        box["error"] = exc
    finally:
        done.set()


class _Spinner:
    """A tqdm line on the stream: a turning bar and the time since the statement started; cleared when done."""

    def __init__(self, stream: TextIO, start: float, counts: Optional[StatementProgress] = None):
        self.frame, self.start, self.stream, self.counts = 0, start, stream, counts
        from tqdm import tqdm  # loaded only when a statement runs long in a terminal

        class Bar(tqdm):
            monitor_interval = 0  # the waiting thread refreshes the line: no tqdm monitor thread

        self.bar = Bar(total=None, file=stream, leave=False, mininterval=0, dynamic_ncols=True, bar_format="{desc}")
        self.tick()

    def tick(self, label: str = "running", note: str = "(Ctrl-C cancels)", steps: Optional[StepReport] = None) -> None:
        self.frame = (self.frame + 1) % len(FRAMES)
        elapsed = time.perf_counter() - self.start
        done = self.counts.describe(elapsed) if self.counts is not None and label == "running" else ""
        text = f"{FRAMES[self.frame]} {label} {elapsed:.1f} s {done + ' ' if done else ''}{note}".rstrip()
        if steps is not None and steps.losses and label == "running":
            text = _step_line(steps, elapsed)
        self.bar.set_description_str(text[:_columns(self.stream) - 1], refresh=False)  # one line: \r redraws it
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def _step_line(steps: StepReport, elapsed: float) -> str:
    """`MINIMIZE step 37/300 loss=0.1234 ▇▆▅▄▃▂▁ ██▍       | 12.3 steps/s [00:03<00:21]`: what matters first,
    as the line is cut to the terminal's width (the bar and the rate are tqdm's meter)."""
    from tqdm import tqdm

    done = len(steps.losses)
    meter = tqdm.format_meter(done, steps.total, elapsed, unit=" steps",
                              bar_format="{bar:10}| {rate_fmt} [{elapsed}<{remaining}]")
    return (f"MINIMIZE step {done}/{steps.total} loss={steps.losses[-1]:.6g} "
            f"{sparkline(steps.losses[-SPARK_WIDTH:])} {meter}")


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 80


def is_terminal(stream: Optional[TextIO]) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def execute(con: Connection, sql: str, progress: Optional[TextIO] = None,
            steps: Optional[StepReport] = None, delay: float = SPINNER_DELAY) -> Outcome:
    """Run sql on a new cursor of con and fetch its rows; raises the statement's Error.

    Ctrl-C (KeyboardInterrupt in this, the main, thread) closes the cursor, which cancels the
    statement; QueryCancelled is raised once it has stopped unless it had already finished."""
    cursor, box, done, counts = con.cursor(), {}, Finished(), StatementProgress()
    # Waiting on `done`, never Thread.join: a KeyboardInterrupt inside join() can leave the thread
    # marked as stopped while it still runs (CPython gh-90882).
    worker = threading.Thread(target=copy_context().run, args=(_work, cursor, sql, box, done, steps, counts),
                              name="trdb-statement", daemon=True)
    start = time.perf_counter()
    spinner: Optional[_Spinner] = None
    worker.start()
    try:
        while not done.wait(TICK):
            if spinner is None and time.perf_counter() - start >= delay and is_terminal(progress):
                spinner = _Spinner(progress, start, counts)
            elif spinner is not None:
                spinner.tick(steps=steps)
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


def _cancel(cursor: Cursor, done: Finished, spinner: Optional[_Spinner]) -> None:
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
