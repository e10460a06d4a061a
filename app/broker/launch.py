"""Where the broker for a data dir is reached and how the GUI starts one."""

from __future__ import annotations

from pathlib import Path

import msgspec

from backend.common.self_command import self_argv
from backend.protocol.endpoint import control_address


class BrokerLaunch(msgspec.Struct, frozen=True):
    """Everything needed to attach to, or spawn, the broker of one data directory."""

    data_dir: Path
    broker_args: tuple[str, ...] = ()
    # Tests stand a script in for the interpreter; None runs PAIR itself (``self_argv``).
    python: str | None = None

    @property
    def control_address(self) -> str:
        """The broker's control socket (named pipe on Windows) for this data dir."""
        return control_address(self.data_dir)

    def command(self) -> list[str]:
        """The child command: a broker speaking JSON-RPC on its stdio."""
        args = ("node", "--stdio", "--data-dir", str(self.data_dir), *self.broker_args)
        if self.python is not None:
            return [self.python, "-m", "backend", *args]
        return self_argv(*args)
