"""Turning mDNS on and off while the broker runs, as the settings say (``local_discovery``,
``public_network``): off, this computer neither announces itself nor listens for others;
members are still reached at the addresses discovery and the roster know."""

from __future__ import annotations

import logging
from collections.abc import Callable

from backend.components.discovery.mdns import MdnsLink
from backend.components.errors.registry import ErrorsRegistry

log = logging.getLogger(__name__)

UNAVAILABLE_ERROR = "discovery:mdns-unavailable"


class MdnsSwitch:
    """Owns the mDNS link while it is on: started when ``wanted()`` turns true, closed (with
    goodbye records) when it turns false. A link that cannot start is reported once and tried
    again only when the setting is turned off and on."""

    def __init__(
        self,
        *,
        make_link: Callable[[], MdnsLink],
        wanted: Callable[[], bool],
        errors_sink: ErrorsRegistry,
    ) -> None:
        self._make_link = make_link
        self._wanted = wanted
        self._errors = errors_sink
        self._on = False  # the state last applied, whether or not the link started
        self.link: MdnsLink | None = None

    async def apply(self) -> None:
        """Start or stop the link if the setting changed since the last call."""
        wanted = self._wanted()
        if wanted == self._on:
            return
        self._on = wanted
        if wanted:
            await self._start()
        else:
            log.info("mDNS: off (local_discovery off or public_network on)")
            self._errors.clear_error(UNAVAILABLE_ERROR)
            await self.close()

    async def close(self) -> None:
        """Close the link, if any (idempotent)."""
        link, self.link = self.link, None
        if link is not None:
            await link.close()

    async def _start(self) -> None:
        link = self._make_link()
        self.link = link  # closed by close() even if stopped while starting
        try:
            await link.start()
        except OSError as exc:
            log.error("mDNS is unavailable (%s); only manual nodes will be found", exc)
            self._errors.raise_error(
                UNAVAILABLE_ERROR,
                f"mDNS could not start ({_reason(exc)}); add other computers by address.",
                severity="warning",
            )
            self.link = None
            await link.close()
            return
        self._errors.clear_error(UNAVAILABLE_ERROR)


def _reason(exc: OSError) -> str:
    """The system's words for ``exc`` without its errno number (``[Errno 98] ...``)."""
    text = exc.strerror or str(exc) or "the network refused it"
    return text[0].lower() + text[1:]
