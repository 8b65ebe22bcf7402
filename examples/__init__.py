"""Runnable examples; importable so the tests can drive them."""
