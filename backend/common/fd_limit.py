"""The process's open-file limit, raised at start so held connections cannot starve it.

Every connection a listener holds is a descriptor. The soft limit a process inherits is often
far below what the system allows it (256 under macOS launchd, 1024 on many Linux desktops), and
once it is reached ``accept()`` fails for everyone, the owner's own requests included. Like Go's
runtime (Syncthing, Tailscale), PAIR raises the soft limit to the hard one at start, capped: a
limit in the millions buys nothing and some systems refuse it. Where the ``resource`` module does
not exist (Windows) nothing is done.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)

# Enough for thousands of clients plus the engines' and members' connections.
WANTED_OPEN_FILES = 65536
# macOS refuses a soft limit above OPEN_MAX (10240) whatever the hard limit says.
DARWIN_OPEN_MAX = 10240


def raise_open_file_limit(wanted: int = WANTED_OPEN_FILES) -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` towards ``wanted`` (never above the hard limit, never
    lowering it); the soft limit in force afterwards, or None where there is none (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if sys.platform == "darwin":
        ceiling = min(ceiling, DARWIN_OPEN_MAX)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        except (ValueError, OSError) as exc:
            log.info("could not raise the open-file limit from %d to %d: %s", soft, ceiling, exc)
            return soft
        log.debug("open-file limit raised from %d to %d", soft, ceiling)
        return ceiling
    return soft


def open_file_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE`` now, or None where there is none (or it is unlimited)."""
    try:
        import resource
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft
