"""A cursor's result as Arrow, pandas, polars and numpy, and in long form (DuckDB's fetch methods and trdb's)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from trdb.api.conversions import arrow_to_polars, polars_module, result_to_arrow, result_to_numpy, result_to_pandas
from trdb.api.row_reader import CURSOR_BATCH_BYTES, fetching, nbytes
from trdb.execution.long_form import long_batches, long_names, long_schema
from trdb.execution.result import layout_of

ARROW_BATCH_ROWS = 256  # tuples converted at a time by fetch_arrow, fetch_long and COPY


class ResultFormats:
    """The fetch methods a Cursor inherits that convert the remaining rows to another library's form;
    `_require_result`, `_tensor_result` and `_take` are the cursor's."""

    @fetching
    def fetch_arrow(self):
        """The remaining rows as a pyarrow Table: key columns and a fixed_shape_tensor column; the rows are
        read a bounded batch at a time, so the Arrow table is the only whole copy."""
        result = self._require_result("fetch_arrow")
        # results without tiles (plain SQL, DESCRIBE) are small and converted at once: each column's type is
        # inferred from all its values
        tiled = result.schema is not None and any(c.is_tensor for c in result.schema)
        batches = self._batches() if tiled else iter([self._take(None)])
        return result_to_arrow(result.schema, result.description, batches)

    fetch_arrow_table = to_arrow_table = fetch_arrow

    def arrow(self, batch_size: int = ARROW_BATCH_ROWS):
        """As DuckDB 2.x: a pyarrow RecordBatchReader over the remaining rows (fetch_arrow() gives a Table)."""
        return self.fetch_arrow().to_reader(max_chunksize=batch_size)

    fetch_record_batch = arrow

    @fetching
    def df(self):
        """The remaining rows as a pandas DataFrame (tiles larger than 0-d as an object column of arrays)."""
        result = self._require_result("df")
        return result_to_pandas(result.schema, result.description, self._take(None))

    fetchdf = fetch_df = df

    @fetching
    def pl(self):
        """The remaining rows as a polars DataFrame (tiles as polars Array columns); polars must be installed."""
        self._require_result("pl")
        polars_module()  # before any row is fetched: without polars the rows stay to be fetched
        return arrow_to_polars(self.fetch_arrow())

    @fetching
    def fetch_long(self):
        """The remaining rows of a tensor result in long form: a pyarrow Table of (index, ..., value) rows,
        one per element of each present tile (CSR tiles: their stored non-zeros), indices in the whole tensor."""
        result = self._tensor_result("fetch_long")
        layout = layout_of(result.schema, [])
        schema = long_schema(long_names(result.schema, layout), result.schema[layout.value_position].name,
                             layout.dtype)
        batches = list(long_batches(layout, self._batches(keep_sparse=True), schema))
        return pa.Table.from_batches(batches, schema=schema)

    @fetching
    def fetchnumpy(self) -> dict[str, np.ndarray]:
        """The remaining rows as numpy columns: keys as int64 arrays, tiles stacked when they share a shape."""
        result = self._require_result("fetchnumpy")
        return result_to_numpy(result.schema, result.description, self._take(None))

    def _batches(self, keep_sparse: bool = False) -> Iterator[list[tuple]]:
        """The remaining rows, a batch of about CURSOR_BATCH_BYTES (at most ARROW_BATCH_ROWS rows) at a time."""
        size = 1
        while True:
            rows = self._take(size, keep_sparse)
            if not rows:
                return
            yield rows
            row_bytes = max(1, sum(nbytes(v) for v in rows[0]))
            size = max(1, min(ARROW_BATCH_ROWS, CURSOR_BATCH_BYTES // row_bytes))
