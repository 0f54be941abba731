"""The cost model's unit costs, in one place: every estimate in the optimizer is built from these.

Costs are in FLOP-equivalents (1e8 per ~1 ms of one core on the reference machine); see
docs/optimizer.md § Cost model for how each was measured.
"""
from __future__ import annotations

FLOPS_PER_MULTIPLY_ADD = 2
TUPLE_COST_FLOPS = 1e6        # Python overhead of one joined tuple (hash probe, kernel call): ~10 us
ELEMENT_COST = 100.0          # one element of a kernel result written and summed: ~1 ns
RETILE_COST = 3e7             # one Retile operator: reads all before it writes, Python loops: ~0.3 ms
RETILE_BYTE_COST = 10.0       # one byte copied into a new tile: ~0.1 ns
EXCHANGE_BYTE_COST = 5.0      # one byte moved between workers
SPILL_BYTE_COST = 260.0       # one byte an operator spills, written to temp_directory and read back once: ~2.6 ns
                              # (8192^2 float32 product at memory_limit 256MB: 5.2 s more than with no limit for
                              # 1.9 GiB of partial sums spilled; see docs/running.md § Memory)
SCAN_BYTE_COST = 400.0        # one byte of a tensor too large for the buffer pool, read from DuckDB and decoded, as
                              # a band reads its inputs again: ~4 ns (that product in 6 bands: 7.2 s more than
                              # spilling for 2.7 GB more read and 1.3 GB less spilled; a lone full scan of 1 GiB
                              # with 2 workers reads at ~2.5 ns)
CACHED_SCAN_BYTE_COST = 0.0   # one byte of a tensor the buffer pool holds, read again: nothing beyond the per-tuple
                              # cost (its tiles are handed on, not copied)
CSR_MAX_DENSITY = 0.1         # a 2-d tile with at most this fraction of non-zeros is stored and computed as CSR
SPARSE_FLOP_COST = 4.0        # one multiply-add of a sparse kernel, per non-zero, against a dense BLAS FLOP
MIN_PARALLEL_COST = 4e8       # plans estimated below ~4 ms of one core run on one worker: starting
                              # workers and exchanges costs ~1 ms each, more than they would save
MIN_TUPLES_PER_WORKER = 4       # a plan none of whose operators puts out this many tuples per worker runs on one
                                # worker, its kernels on BLAS's threads (2 cores, NNMF 2048 x 2048 rank 64 in tiles
                                # of 1024: two partitions of 2 products each, 51-54 ms a step; one, 40-47 ms)
PARALLEL_WORK_PER_TUPLE = 10.0  # a plan whose kernels' work is below this many times its per-tuple cost runs on one
                                # worker: the per-tuple Python holds the GIL and two workers contend for it (2 cores:
                                # 1024^2 matmul in 32^2 tiles 0.40 s on one worker, 0.74 s on two; 2048^2 in 128^2
                                # tiles (work 5x the tuples') 0.23 against 0.28 s; in 256^2 (40x) 0.105 against 0.085)
