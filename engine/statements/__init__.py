"""Executors of trql statements other than queries: DDL, DML, session and catalog commands."""
