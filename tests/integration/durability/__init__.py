"""Crash cycles: kill -9 of the broker, its worker and the app, and what survives."""
