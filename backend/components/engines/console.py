"""How the engines component starts the console programs it runs to completion (installers,
``lms``, version probes, a package's first-run step): without a console window on Windows.

The frozen broker has no console of its own, so Windows would open a new console window for
each such child and show it for as long as it runs. Elsewhere nothing is added, so these children
start exactly as they always have. Not ``backend.core.lifetime``'s options: those also give the
child a session and a parent-death signal on Linux, which commands waited for never needed.
"""

from __future__ import annotations

import sys

from backend.core.lifetime import SpawnOptions

# Windows' value (``subprocess.CREATE_NO_WINDOW`` exists only on Windows).
CREATE_NO_WINDOW = 0x08000000


def command_spawn_options(platform: str = sys.platform) -> SpawnOptions:
    """Keywords for starting a console program on ``platform`` (a ``sys.platform`` value)."""
    if platform == "win32":
        return SpawnOptions(creationflags=CREATE_NO_WINDOW)
    return SpawnOptions()
