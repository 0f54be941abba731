"""Relational reverse-mode differentiation: the gradient of a query is another query."""
