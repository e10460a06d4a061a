"""Typed payloads of the broker's JSON-RPC surface (see docs/RPC.md), one module per domain:
``base`` (ids and the ``Wire`` base), ``broker``, ``settings``, ``engines``, ``scheduler``,
``nodes``, ``jobs``, ``results``, ``cluster``, ``apikeys``, ``hub``. Import each name from its
domain."""
