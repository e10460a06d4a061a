"""Logging for every PAIR process: stderr (human or JSON lines) plus a rotating file."""

from __future__ import annotations

import io
import json
import logging
import logging.handlers
import os
import time
from pathlib import Path

from backend.common.files import ensure_private_dir
from backend.protocol.types.broker import LogLevel

_LEVELS: dict[LogLevel, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_BARE_FORMAT = "%(levelname)s %(name)s: %(message)s"
_HUMAN_FORMAT = "%(asctime)s %(levelname)-7s [%(process_name)s] %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, process, logger, msg (and exc)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one JSON line."""
        payload: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "process": getattr(record, "process_name", ""),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False)


class _ProcessNameFilter(logging.Filter):
    def __init__(self, process_name: str) -> None:
        super().__init__()
        self._name = process_name

    def filter(self, record: logging.LogRecord) -> bool:
        record.process_name = self._name
        return True


def configure(
    process_name: str,
    *,
    level: LogLevel,
    log_dir: Path | None,
    json_logs: bool,
    bare: bool = False,
) -> Path | None:
    """Route the root logger to stderr and (when ``log_dir``) ``<log_dir>/<process>.log``.

    ``bare`` drops time and process from stderr lines: a worker's parent adds its own.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    name_filter = _ProcessNameFilter(process_name)
    stderr = logging.StreamHandler()
    if json_logs:
        stderr.setFormatter(JsonFormatter())
    else:
        stderr.setFormatter(logging.Formatter(_BARE_FORMAT) if bare else _human_formatter())
    stderr.addFilter(name_filter)
    root.addHandler(stderr)
    log_file = None
    if log_dir is not None:
        log_file = ensure_private_dir(log_dir) / f"{process_name}.log"
        rotating = PrivateRotatingFileHandler(
            log_file, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
        )
        rotating.setFormatter(_human_formatter())
        rotating.addFilter(name_filter)
        root.addHandler(rotating)
        os.chmod(log_file, 0o600)
    set_level(level)
    return log_file


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file that only its owner can read: each file it opens, the fresh one
    after every rotation included, is created 0600 (the default mode, 0644 under the usual
    umask, would show other users what PAIR logs)."""

    def _open(self) -> io.TextIOWrapper:
        descriptor = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return open(descriptor, "a", encoding=self.encoding, errors=self.errors)


def set_level(level: LogLevel) -> None:
    """Change the level of every PAIR logger at once."""
    logging.getLogger().setLevel(_LEVELS[level])
    # Third-party chatter stays at warning unless we debug.
    noisy = logging.DEBUG if level == "debug" else logging.WARNING
    for name in ("asyncio", "aiohttp", "zeroconf"):
        logging.getLogger(name).setLevel(noisy)


def _human_formatter() -> logging.Formatter:
    formatter = logging.Formatter(_HUMAN_FORMAT)
    formatter.converter = time.gmtime
    return formatter
