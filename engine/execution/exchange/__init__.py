"""Exchanges: bounded channels between producer and consumer instances, and how each exchange routes batches."""
