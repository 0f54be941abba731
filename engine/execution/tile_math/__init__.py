"""tile_math."""
