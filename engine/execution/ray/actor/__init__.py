"""actor."""
