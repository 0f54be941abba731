"""A spool: tuples kept in memory while the memory budget allows, the rest in a spill file, read back in order.

What holds tuples for later (a query's result before the cursor takes it, a shared subplan's
tuples, a hash join's partitions) appends them to a spool. While its reservation grows, they stay
in a list; the first refused request sends that tuple and every later one to a spill file, so the
order is kept. `contents()` is a plain list when nothing spilled (the common, fast case), else the
spool itself, which reads back batch by batch and can be read any number of times.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional, Union

from trdb.execution.exchange.channel import batch_bytes
from trdb.storage.memory import Reservation
from trdb.storage.spill import READ_BATCH_BYTES, SpillFile


class RowSpool:
    def __init__(self, reservation: Reservation, new_file: Callable[[], SpillFile]):
        self.reservation = reservation
        self._new_file = new_file
        self._rows: list = []
        self._file: Optional[SpillFile] = None
        self._count = 0

    def append_batch(self, batch: list) -> None:
        if not batch:
            return
        self._count += len(batch)
        if self._file is None and self.reservation.try_grow(batch_bytes(batch)):
            self._rows.extend(batch)
            return
        if self._file is None:
            self._file = self._new_file()
        self.reservation.note_spilled(self._file.write(batch))

    def extend(self, batches: Iterable[list]) -> "RowSpool":
        for batch in batches:
            self.append_batch(batch)
        if self._file is not None:
            self._file.finish()
        return self

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def contents(self) -> Union[list, "RowSpool"]:
        """A list when every tuple is in memory, else this spool (iterable, sized, `batches()`)."""
        return self._rows if self._file is None else self

    def __len__(self) -> int:
        return self._count

    def batches(self, batch_bytes_wanted: int = READ_BATCH_BYTES) -> Iterator[list]:
        for start in range(0, len(self._rows), 64):
            yield self._rows[start:start + 64]
        if self._file is not None:
            yield from self._file.batches(batch_bytes_wanted)

    def __iter__(self) -> Iterator[tuple]:
        for batch in self.batches():
            yield from batch

    def close(self) -> None:
        """Forget the tuples: the spill file is removed and the memory given back."""
        if self._file is not None:
            self._file.remove()
            self._file = None
        self._rows = []
        self.reservation.release_all()


def row_batches(rows: Union[list, RowSpool], size: int = 64) -> Iterator[list]:
    """Batches of a list or a spool alike (for consumers that take either)."""
    if isinstance(rows, RowSpool):
        yield from rows.batches()
        return
    for start in range(0, len(rows), size):
        yield rows[start:start + size]
