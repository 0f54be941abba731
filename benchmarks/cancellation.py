"""How long a cancelled statement takes to stop: long FILL and FROM ? loads of a million small tiles and FILLs of a
few large tiles, the cursor closed from another thread after they have run a while (cancellation is an outcome in
tests, a time here); the last column says whether the worst stop took under half a second, the goal."""
from __future__ import annotations

import argparse
import threading
import time

import numpy as np

import trdb

STATEMENTS = [
    ("FILL of 1M tiles of 1 x 1", "CREATE TENSOR f0 SHAPE (1, 1000000) TILE (1, 1) FILL RANDOM_UNIFORM(-1, 1, 0)", None),
    ("FROM ? of 1M tiles of 1 x 1", "CREATE TENSOR f0 FROM ? TILE (1, 1)", (1, 1000000)),
    ("FROM ? of 250K tiles of 4 x 4", "CREATE TENSOR f0 FROM ? TILE (4, 4)", (1000, 4000)),
    ("FILL of 100K tiles of 64 x 64", "CREATE TENSOR f0 SHAPE (6400, 6400) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)",
     None),
    # large tiles: a tile takes seconds to draw, so the FILL notices cancellation between chunks of a tile
    ("FILL of 16 tiles of 4096 x 4096", "CREATE TENSOR f0 SHAPE (16384, 16384) TILE (4096, 4096) "
     "FILL RANDOM_NORMAL(0, 1, 1)", None),
    ("FILL of 4 tiles of 8192 x 8192", "CREATE TENSOR f0 SHAPE (16384, 16384) TILE (8192, 8192) "
     "FILL RANDOM_UNIFORM(-1, 1, 1)", None),
]
GOAL = 0.5  # seconds from Cursor.close() to the statement's end, on an idle machine


def stop_time(statement: str, shape, after: float) -> tuple[float, str]:
    """Seconds from Cursor.close() to the statement's end, and what it raised."""
    con = trdb.connect()
    cur, raised = con.cursor(), []
    params = [np.ones(shape, np.float32)] if shape else None

    def run() -> None:
        try:
            cur.execute(statement, params)
        except trdb.Error as exc:
            raised.append(type(exc).__name__)
    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(after)
    started = time.perf_counter()
    cur.close()
    thread.join()
    stopped = time.perf_counter() - started
    con.close()
    return stopped, raised[0] if raised else "finished first"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--after", type=float, nargs="+", default=[0.3, 1.0, 2.0],
                        help="seconds to let it run first")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'statement':32} {'after':>6} {'stop (median)':>14} {'worst':>7}  {'outcome':16} under {GOAL} s")
    for label, statement, shape in STATEMENTS:
        for after in args.after:
            runs = [stop_time(statement, shape, after) for _ in range(args.repeats)]
            times = sorted(t for t, _ in runs)
            verdict = "yes" if times[-1] < GOAL else "NO"
            print(f"{label:32} {after:5.1f}s {times[len(times) // 2]:13.3f}s {times[-1]:6.3f}s  {runs[0][1]:16} {verdict}")


if __name__ == "__main__":
    main()
