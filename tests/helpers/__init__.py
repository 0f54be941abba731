"""Helpers the tests share: oracles, generators, stand-ins and runners (no tests here)."""
