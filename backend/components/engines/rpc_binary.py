"""Finding llama.cpp's RPC server, the one built with a given ``llama-server``.

The RPC protocol is version-checked, so only the server from the same build will do: the one in
``llama-server``'s own folder, where both the pip package and the release archives put it.
"""

from __future__ import annotations

import os
from pathlib import Path

# Current llama.cpp names it ggml-rpc-server; earlier builds named it rpc-server.
RPC_SERVER_NAMES = ("ggml-rpc-server", "rpc-server")


def rpc_server_path(llama_server: Path) -> Path | None:
    """The executable RPC server beside ``llama_server`` (also beside the file a link to it
    points at), or None when its build has none (blocking: call it in a thread)."""
    folders = [llama_server.parent]
    resolved = llama_server.resolve().parent
    if resolved != folders[0]:
        folders.append(resolved)
    suffix = ".exe" if llama_server.suffix.lower() == ".exe" else ""
    for folder in folders:
        for name in RPC_SERVER_NAMES:
            candidate = folder / f"{name}{suffix}"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    return None
