"""Pictures: a flat loss draws a flat sparkline, spy markers are sized to the matrix, .plot says how to install
matplotlib from a clone, and the README shows them."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

import trdb
from trdb.api.shell.pictures import DPI, POINTS_PER_INCH, spy_marker_size
from trdb.api.shell.progress import SPARKS, sparkline
from trdb.api.shell.runner import Runner

README = Path(__file__).parent.parent.parent / "README.md"


def test_a_loss_flat_to_a_millionth_draws_a_flat_line_and_a_falling_one_falls():
    flat = [2.302585 * (1 + 1e-6 * (-1) ** k * (k % 3)) for k in range(16)]
    assert len(set(sparkline(flat))) == 1
    falling = [1.0 - 0.02 * k for k in range(16)]
    levels = [SPARKS.index(char) for char in sparkline(falling)]
    assert levels[0] == len(SPARKS) - 1 and levels[-1] == 0 and levels == sorted(levels, reverse=True)
    assert sparkline([4.0, 3.0, 2.0, 1.0]) == "█▆▃▁"
    small = [1e-9 * (1 - 0.1 * k) for k in range(8)]  # small losses still show their fall: the floor is relative
    assert sparkline(small)[0] == "█" and sparkline(small)[-1] == "▁"


def test_spy_markers_are_sized_to_the_matrix():
    axes = (460.0, 460.0)  # pixels
    small = spy_marker_size([10, 10], axes)
    assert small == pytest.approx(46 * POINTS_PER_INCH / DPI)  # one entry fills its 46-pixel cell
    assert spy_marker_size([10, 40], axes) == pytest.approx(11.5 * POINTS_PER_INCH / DPI)  # the narrower side
    large = spy_marker_size([100_000, 100_000], axes)
    assert large == pytest.approx(POINTS_PER_INCH / DPI)  # one pixel, not a blob per entry


def test_a_sparse_spy_picture_is_mostly_white(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    runner = Runner(trdb.connect(), out=io.StringIO(), err=io.StringIO())
    script = ("CREATE TABLE e AS SELECT DISTINCT (hash(range) % 2000)::BIGINT AS r, (hash(range + 5000) % 2000)::BIGINT"
              " AS c, 1.0::DOUBLE AS v FROM range(3000);\n"
              "CREATE TENSOR S FROM COO e (r, c, v) SHAPE (2000, 2000) TILE (500, 500);\n"
              f".plot spy S {tmp_path / 's.png'}\n")
    assert runner.run_script(script) == 0, runner.err.getvalue()
    pixels = matplotlib.image.imread(tmp_path / "s.png")[..., :3].mean(axis=2)
    inside = pixels[100:500, 100:500]  # within the axes: 0.075% of the entries are non-zero
    assert (inside < 0.9).mean() < 0.1  # dots, not the solid stripes of markers sized to the count
    runner.con.close()


def test_plot_without_matplotlib_says_how_to_install_it_from_a_clone(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where the plot extra is not installed
    runner = Runner(trdb.connect(), out=io.StringIO(), err=io.StringIO())
    script = "CREATE TENSOR A SHAPE (2, 2) TILE (2, 2) FILL ONES;\n.plot spy A a.png\n"
    assert runner.run_script(script) == 1
    assert "pip install -e '.[plot]'" in runner.err.getvalue() and "Traceback" not in runner.err.getvalue()
    runner.con.close()


def test_the_readme_shows_the_pictures_and_the_plot_extra():
    text = README.read_text()
    assert ".spy " in text and ".plot spy " in text and ".plot loss " in text
    assert "pip install -e '.[plot]'" in text
