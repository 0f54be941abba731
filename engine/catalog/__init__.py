"""catalog package."""
