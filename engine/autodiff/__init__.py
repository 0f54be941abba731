"""autodiff package."""
