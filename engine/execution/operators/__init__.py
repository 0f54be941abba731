"""Volcano operators, one per module, and the operator interface they share."""
