"""PAIR backend: the broker, its components and workers. Never imports Qt."""

__version__ = "0.1.0"
