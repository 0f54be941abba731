"""Pictures: `.spy TENSOR` draws which tiles are stored and how dense (as matplotlib's spy, in Unicode blocks);
`.plot` writes a PNG of a sparsity pattern or of the last MINIMIZE's loss curve (matplotlib, the plot extra)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from trdb.api.dbapi import Connection
from trdb.api.shell.registry import CommandError
from trdb.kernels.sparse import count_nonzero, is_sparse
from trdb.storage.sql_text import quote_identifier

if TYPE_CHECKING:
    from trdb.api.shell.runner import Runner

SHADES = [(0.75, "█"), (0.5, "▓"), (0.25, "▒"), (0.0, "░")]  # density at least this: this block
ZERO = "·"              # tiles stored whose values are all zero
LEGEND = "█ ≥75%  ▓ ≥50%  ▒ ≥25%  ░ >0  · stored, all zero  (blank) no tile"
DPI = 100               # the PNG's pixels per inch
POINTS_PER_INCH = 72    # matplotlib sizes markers in points
INSTALL_PLOT = ("pip install -e '.[plot]' in trdb's clone (pip install 'trdb[plot]' where trdb came from a "
                "package index, or pip install matplotlib)")


def _tensor_info(con: "Connection", name: str) -> tuple[str, list[int], list[int]]:
    """(name as stored, shape, tile) of a tensor; a CommandError when there is none of that name."""
    for row in con.execute("SHOW TENSORS").fetchall():
        if str(row[0]).lower() == name.lower():
            return str(row[0]), _ints(row[2]), _ints(row[3])
    raise CommandError(f'no tensor is named "{name}"; .tables lists them')


def _ints(text) -> list[int]:
    return [int(part) for part in str(text).strip("[]() ").split(",") if part.strip()]


def tile_counts(con: "Connection", name: str, shape: list[int], tile: list[int]) -> np.ndarray:
    """Non-zeros per tile as a 2-d grid; -1 where no tile is stored. Tiles are read a batch at a time."""
    grid_shape = [math.ceil(n / t) for n, t in zip(shape, tile)]
    grid = np.full(grid_shape if len(grid_shape) == 2 else [1] + grid_shape, -1, dtype=np.int64)
    cursor = con.cursor()
    cursor.execute(f"SELECT * FROM {quote_identifier(name)}")
    while batch := cursor.fetchmany(256):
        for row in batch:
            value = row[-1]
            nnz = int(value.nnz) if is_sparse(value) else count_nonzero(value)
            grid[tuple(row[:-1]) if len(row) == 3 else (0, row[0])] = nnz
    return grid


def _tile_sizes(shape: list[int], tile: list[int]) -> np.ndarray:
    """The number of entries of each tile (the last tile of a dimension may be short)."""
    sizes = [np.minimum(t, n - np.arange(math.ceil(n / t)) * t) for n, t in zip(shape, tile)]
    return np.multiply.outer(sizes[0], sizes[1]) if len(sizes) == 2 else sizes[0][None, :]


def _group(grid: np.ndarray, sizes: np.ndarray, across: int, down: int) -> tuple[np.ndarray, np.ndarray]:
    """Tiles gathered into blocks of down x across: non-zeros (-1 where none is stored) and entries."""
    rows, cols = math.ceil(grid.shape[0] / down), math.ceil(grid.shape[1] / across)
    nnz, present = np.zeros((rows, cols)), np.zeros((rows, cols), dtype=bool)
    total = np.zeros((rows, cols))
    for r in range(grid.shape[0]):
        for c in range(grid.shape[1]):
            total[r // down, c // across] += sizes[r, c]
            if grid[r, c] >= 0:
                nnz[r // down, c // across] += grid[r, c]
                present[r // down, c // across] = True
    return np.where(present, nnz, -1), total


def _block(nnz: float, total: float) -> str:
    if nnz < 0:
        return " "
    if nnz == 0:
        return ZERO
    return next(char for floor, char in SHADES if nnz / total >= floor)


def draw(grid: np.ndarray, shape: list[int], tile: list[int], width: int = 80, height: int = 40) -> list[str]:
    """The picture's lines: a frame around one block per tile (tiles grouped when there are too many)."""
    sizes = _tile_sizes(shape, tile)
    cell = 2 if grid.shape[1] * 2 <= width - 4 else 1  # two characters per tile look square in a terminal
    across = max(1, math.ceil(grid.shape[1] * cell / (width - 4)))
    down = max(1, math.ceil(grid.shape[0] / height))
    nnz, total = _group(grid, sizes, across, down)
    lines = ["┌" + "─" * (nnz.shape[1] * cell) + "┐"]
    for r in range(nnz.shape[0]):
        lines.append("│" + "".join(_block(n, t) * cell for n, t in zip(nnz[r], total[r])) + "│")
    lines.append("└" + "─" * (nnz.shape[1] * cell) + "┘")
    return lines


def _summary(name: str, grid: np.ndarray, shape: list[int], tile: list[int], lines: list[str]) -> str:
    stored = int((grid >= 0).sum())
    entries = int(np.prod(shape))
    nonzero = int(grid[grid > 0].sum())
    blocks = len(lines[1]) - 2
    per = "" if blocks >= grid.shape[1] else f"; each block stands for about {math.ceil(grid.shape[1] / blocks)} tile columns"
    return (f"{name}: {' x '.join(map(str, shape))}, tiles {' x '.join(map(str, tile))}: {stored} of {grid.size} tiles "
            f"stored, {nonzero} non-zeros ({100 * nonzero / max(entries, 1):.3g}% of entries){per}\n{LEGEND}")


def spy_command(runner: "Runner", args: list[str]) -> bool:
    if len(args) != 1:
        raise CommandError("usage: .spy TENSOR")
    name, shape, tile = _tensor_info(runner.con, args[0])
    if len(shape) > 2:
        raise CommandError(f".spy draws tensors of one or two dimensions; {name} has {len(shape)}")
    grid = tile_counts(runner.con, name, shape, tile)
    width = runner.width() or 80
    lines = draw(grid, shape if len(shape) == 2 else [1] + shape, tile if len(tile) == 2 else [1] + tile, width)
    runner.message("\n".join(lines) + "\n" + _summary(name, grid, shape, tile, lines))
    return True


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no window
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandError(f".plot needs matplotlib, the plot extra\nHINT: {INSTALL_PLOT}") from None
    return plt


def plot_command(runner: "Runner", args: list[str]) -> bool:
    """.plot spy TENSOR FILE.png, or .plot loss FILE.png."""
    if len(args) == 3 and args[0].lower() == "spy":
        figure = _spy_figure(runner, args[1])
    elif len(args) == 2 and args[0].lower() == "loss":
        figure = _loss_figure(runner)
    else:
        raise CommandError("usage: .plot spy TENSOR FILE.png | .plot loss FILE.png")
    path = args[-1]
    try:
        figure.savefig(path, dpi=DPI)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        _pyplot().close(figure)
    runner.message(f"wrote {path}")
    return True


def _spy_figure(runner: "Runner", tensor: str):
    name, shape, _tile = _tensor_info(runner.con, tensor)
    if len(shape) != 2:
        raise CommandError(f".plot spy draws 2-d tensors; {name} has {len(shape)} dimensions")
    matrix = runner.con.execute(f"SELECT * FROM {quote_identifier(name)}").fetch_sparse()
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 6 * min(3.0, max(1 / 3, shape[0] / shape[1]))), dpi=DPI)
    box = axes.get_position()  # the axes' share of the figure
    width, height = figure.get_size_inches() * DPI
    size = spy_marker_size(shape, (box.height * height, box.width * width))
    axes.spy(matrix, markersize=size, markeredgewidth=0, aspect="auto")
    axes.set_title(f"{name}: {matrix.nnz} non-zeros of {shape[0]} x {shape[1]}")
    return figure


def spy_marker_size(shape: list[int], axes_pixels: tuple[float, float]) -> float:
    """A spy marker's size in points: one entry's share of the axes (pixels per row or per column, the
    smaller), and never under one pixel: a small matrix shows its cells, a large sparse one single dots
    (a marker sized to the count of non-zeros drew 0.075% density as solid stripes)."""
    per_entry = min(axes_pixels[0] / max(shape[0], 1), axes_pixels[1] / max(shape[1], 1))
    return max(1.0, per_entry) * POINTS_PER_INCH / DPI


def _loss_figure(runner: "Runner"):
    if not runner.losses:
        raise CommandError("no MINIMIZE has run in this shell yet: .plot loss draws the last one's losses")
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(range(1, len(runner.losses) + 1), runner.losses)
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    if min(runner.losses) > 0 and max(runner.losses) / min(runner.losses) > 100:
        axes.set_yscale("log")
    axes.set_title(f"MINIMIZE: {len(runner.losses)} steps, last loss {runner.losses[-1]:.6g}")
    return figure
