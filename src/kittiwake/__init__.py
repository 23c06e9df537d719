"""Kittiwake: a durable task queue and pull-based scheduler for Python."""

__version__ = "0.1.0"
