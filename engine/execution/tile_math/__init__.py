"""Kernels' helpers of the operators: compiled tile expressions, stacked and in-place kernels, placed and shared products."""
