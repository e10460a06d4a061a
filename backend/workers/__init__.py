"""Worker processes: each runs as ``python -m backend.workers.<name>`` under the broker."""
