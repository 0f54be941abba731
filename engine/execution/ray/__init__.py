"""The Ray executor: the same physical plan run in Ray actors."""
