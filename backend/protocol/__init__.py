"""Wire contract shared by the broker, its workers, the CLI and the GUI.

This package is the only part of ``backend`` that ``app`` may import. It holds framing,
message shapes, error codes, typed payloads and an asyncio JSON-RPC peer. No Qt, no
component code.
"""

PROTOCOL_VERSION = 1
