"""Discovery's timing, as constructor parameters so tests can shorten it."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from backend.components.discovery.state import EvictionPolicy

# Hidden knobs for tests: shortened intervals, or no mDNS at all.
ENV_SCAN_INTERVAL = "PAIR_DISCOVERY_SCAN_INTERVAL"
ENV_TELEMETRY_INTERVAL = "PAIR_DISCOVERY_TELEMETRY_INTERVAL"
ENV_PROBE_INTERVAL = "PAIR_DISCOVERY_PROBE_INTERVAL"
ENV_INTERFACE_INTERVAL = "PAIR_DISCOVERY_INTERFACE_INTERVAL"
ENV_MDNS = "PAIR_DISCOVERY_MDNS"
DEFAULT_TELEMETRY_INTERVAL = 2.0


class DiscoveryTiming(msgspec.Struct, frozen=True):
    """Intervals in seconds; ``telemetry_backoff`` is the delay after 1, 2, 3, 4+ failures."""

    scan_interval: float = 5.0
    telemetry_interval: float = DEFAULT_TELEMETRY_INTERVAL
    telemetry_backoff: tuple[float, ...] = (4.0, 8.0, 16.0, 30.0)
    manual_probe_interval: float = 10.0
    interface_interval: float = 10.0  # how soon a changed address is announced over mDNS
    fetch_timeout: float = 3.0
    policy: EvictionPolicy = msgspec.field(default_factory=EvictionPolicy)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> DiscoveryTiming:
        """Defaults, with the test knobs applied (backoff scales with the telemetry interval)."""
        default = cls()
        telemetry = _seconds(environ, ENV_TELEMETRY_INTERVAL, default.telemetry_interval)
        scale = telemetry / DEFAULT_TELEMETRY_INTERVAL
        return cls(
            scan_interval=_seconds(environ, ENV_SCAN_INTERVAL, default.scan_interval),
            telemetry_interval=telemetry,
            telemetry_backoff=tuple(delay * scale for delay in default.telemetry_backoff),
            manual_probe_interval=_seconds(
                environ, ENV_PROBE_INTERVAL, default.manual_probe_interval
            ),
            interface_interval=_seconds(
                environ, ENV_INTERFACE_INTERVAL, default.interface_interval
            ),
            fetch_timeout=min(default.fetch_timeout, max(0.5, telemetry)),
        )


def mdns_enabled(environ: Mapping[str, str]) -> bool:
    """Whether mDNS runs (``PAIR_DISCOVERY_MDNS=0`` turns it off, for tests)."""
    return environ.get(ENV_MDNS, "1") != "0"


def telemetry_delay(timing: DiscoveryTiming, failures: int) -> float:
    """Seconds until the next telemetry poll of a node that failed ``failures`` times in a row."""
    if failures <= 0:
        return timing.telemetry_interval
    backoff = timing.telemetry_backoff
    return backoff[min(failures, len(backoff)) - 1]


def _seconds(environ: Mapping[str, str], key: str, default: float) -> float:
    try:
        value = float(environ.get(key, ""))
    except ValueError:
        return default
    return value if value > 0 else default
