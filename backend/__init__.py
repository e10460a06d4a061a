"""PAIR backend: the broker, its components and workers. Never imports Qt."""

from backend.common.buildinfo import VERSION

__version__ = VERSION
