"""The GUI process's own log: stderr plus a rotating ``app.log`` next to the broker's log."""

from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path

from backend.protocol.endpoint import log_dir

_FORMAT = "%(asctime)s %(levelname)-7s [app] %(name)s: %(message)s"


def configure_logging(data_dir: Path, level: str) -> Path | None:
    """Log at ``level`` to stderr and to ``<log dir>/app.log`` (5 MB x 3, mode 0600)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    formatter = logging.Formatter(_FORMAT)
    stderr = logging.StreamHandler()
    stderr.setFormatter(formatter)
    root.addHandler(stderr)
    folder = log_dir(data_dir)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / "app.log"
        rotating = logging.handlers.RotatingFileHandler(
            path, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
        )
    except OSError as exc:
        logging.getLogger(__name__).warning("cannot write the app log in %s: %s", folder, exc)
        return None
    os.chmod(path, 0o600)
    rotating.setFormatter(formatter)
    root.addHandler(rotating)
    return path
