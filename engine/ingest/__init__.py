"""Turning inputs into tiles: arrays, scipy.sparse and COO entries, FILL generators, npy and Parquet/CSV files."""
