"""PAIR's desktop app: a PySide6 shell that runs asyncio on the Qt loop (qasync).

It starts or attaches to the broker (``backend``) and talks to it only over JSON-RPC, importing
nothing from ``backend`` but the wire contract in ``backend.protocol``.
"""
