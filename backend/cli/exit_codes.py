"""Exit codes of the ``pair`` command (documented in ``pair --help``)."""

from typing import Final

OK: Final = 0
ERROR: Final = 1
USAGE: Final = 2
ALREADY_RUNNING: Final = 3
NOT_RUNNING: Final = 4
