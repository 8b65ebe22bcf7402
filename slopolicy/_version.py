"""The package version (a leaf: telemetry reads it without importing the package top)."""

__version__ = "0.1.0"
