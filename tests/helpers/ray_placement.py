"""Ray tests' spy on result placement: which result tiles the driver received placed in its shared array."""
from __future__ import annotations


def received_tiles(monkeypatch) -> list[tuple[tuple, bool]]:
    """Every result tile the final gather receives from now on, in arrival order: its keys, and whether it
    came as a `Placed` marker (its actor wrote it into the result's shared array) rather than as values."""
    from trdb.execution.ray import cross_process_canvas as shared_canvas
    seen: list[tuple[tuple, bool]] = []
    received = shared_canvas.SharedCanvas.received

    def spy(self, rows):
        seen.extend((tuple(row[:-1]), isinstance(row[-1], shared_canvas.Placed)) for row in rows)
        return received(self, rows)
    monkeypatch.setattr(shared_canvas.SharedCanvas, "received", spy)
    return seen
